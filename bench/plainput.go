package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lakestream/lakestream/store"
)

// PlainPut is the second baseline: what the bytes cost without our store
// layer at all. On s3:// one SDK PutObject per part with the SDK's
// defaults (no pack format, no checksum of ours), on gs:// and az:// one
// upload per part with those SDKs' defaults; on file:// a plain
// create, write and fsync per part. Elsewhere (mem://, NewStore) it falls
// back to the store's Put, as raw-put.
const PlainPut = "plain-put"

// newPlainPut returns the plain-put writer for the store at storeURL (s
// is the store itself, for the fallback).
func newPlainPut(ctx context.Context, s store.Store, storeURL string, latency time.Duration) (putFunc, error) {
	var put putFunc
	u, err := url.Parse(storeURL)
	switch {
	case storeURL == "" || err != nil:
	case u.Scheme == "file":
		put = plainFile(filepath.FromSlash(u.Path))
	case u.Scheme == "s3":
		if put, err = plainS3(ctx, u); err != nil {
			return nil, err
		}
	case u.Scheme == "gs":
		if put, err = plainGCSPut(ctx, u); err != nil {
			return nil, err
		}
	case u.Scheme == "az":
		if put, err = plainAzurePut(u); err != nil {
			return nil, err
		}
	}
	if put == nil {
		put = func(ctx context.Context, key string, data []byte) error {
			return s.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
		}
	}
	if latency <= 0 {
		return put, nil
	}
	// The same added latency as the store wrapper gives raw-put.
	return func(ctx context.Context, key string, data []byte) error {
		t := time.NewTimer(latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		return put(ctx, key, data)
	}, nil
}

func plainFile(dir string) putFunc {
	return func(_ context.Context, key string, data []byte) error {
		name := filepath.Join(dir, filepath.FromSlash(key))
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		f, err := os.Create(name)
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
}

// plainS3 is one SDK PutObject per part (see plainS3Client).
func plainS3(ctx context.Context, u *url.URL) (putFunc, error) {
	client, bucket, prefix, err := plainS3Client(ctx, u)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, key string, data []byte) error {
		_, err := client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(prefix + key),
			Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
		})
		return err
	}, nil
}

// plainS3Client is an SDK client with its defaults for
// s3://bucket/prefix?endpoint=&region=&path-style=, except an idle
// connection pool as large as the store's, so that the baselines measure
// transfers, not connection churn. Keys go under prefix ("" or ending in /).
func plainS3Client(ctx context.Context, u *url.URL) (client *s3.Client, bucket, prefix string, err error) {
	bucket, prefix = u.Host, strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	q := u.Query()
	region := q.Get("region")
	if region == "" {
		region = "us-east-1"
	}
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region),
		config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConns = 256
			t.MaxIdleConnsPerHost = 64
		})))
	if err != nil {
		return nil, "", "", fmt.Errorf("plain S3 client: loading AWS configuration: %w", err)
	}
	pathStyle, _ := strconv.ParseBool(q.Get("path-style"))
	client = s3.NewFromConfig(cfg, func(so *s3.Options) {
		if e := q.Get("endpoint"); e != "" {
			so.BaseEndpoint = aws.String(e)
		}
		so.UsePathStyle = pathStyle
		// The SDK logs a line on every GET of an object stored without
		// its checksums otherwise.
		so.DisableLogOutputChecksumValidationSkipped = true
	})
	return client, bucket, prefix, nil
}
