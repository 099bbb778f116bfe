# The image of the Kubernetes pieces: lakefs-csi (the node plugin),
# lakefs-mount (started by it, one per shared mount) and lakefs-produce
# (for producer pods). Build: make image (IMAGE=REGISTRY/lakestream:TAG),
# which passes VERSION (git describe): the image has no .git to read it from.
FROM golang:1.26-bookworm AS build
ARG VERSION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -tags disable_grpc_modules -ldflags="-s -X github.com/lakestream/lakestream/internal/buildinfo.version=${VERSION}" \
    -o /out/ ./cmd/lakefs-csi ./cmd/lakefs-mount ./cmd/lakefs-produce

FROM debian:bookworm-slim
# CA certificates for S3 over TLS; lakefs-mount mounts FUSE itself (as
# root, through /dev/fuse), so no fusermount is needed.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/lakefs-csi"]
