# The image of the Kubernetes pieces: lakefs-csi (the node plugin),
# lakefs-mount (started by it, one per shared mount) and lakefs-produce
# (for producer pods). Build: docker build -t lakestream/lakestream:0.1.0 .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/ ./cmd/lakefs-csi ./cmd/lakefs-mount ./cmd/lakefs-produce

FROM debian:bookworm-slim
# CA certificates for S3 over TLS; lakefs-mount mounts FUSE itself (as
# root, through /dev/fuse), so no fusermount is needed.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/lakefs-csi"]
