package bench

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// plainGetFunc reads file f's own object (f.plain) to its end into buf,
// checking its CRC32C as the bytes arrive.
type plainGetFunc func(ctx context.Context, f benchFile, buf []byte) error

// newPlainGet is plain-get's reader for the run's store at storeURL:
// on s3:// one SDK GetObject per object (the SDK's defaults, the body read
// as it arrives), on gs:// and az:// those SDKs' plain reads, on file:// a plain open and read of the object's file.
// Nothing of Lakestream is in the path but the CRC32C check every row
// makes. That check is the only one: the SDK's own validation of a
// checksum the server returns (versitygw stores one for every object) is
// off, as in our store's client, so that no row verifies the bytes twice.
func newPlainGet(ctx context.Context, storeURL string) (plainGetFunc, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		return nil, fmt.Errorf("plain-get: %w", err)
	}
	switch u.Scheme {
	case "file":
		dir := filepath.FromSlash(u.Path)
		return func(_ context.Context, f benchFile, buf []byte) error {
			return readFile(filepath.Join(dir, filepath.FromSlash(f.plain)), f, buf)
		}, nil
	case "s3":
		client, bucket, prefix, err := plainS3Client(ctx, u)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, f benchFile, buf []byte) error {
			out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(prefix + f.plain)}, noChecksum)
			if err != nil {
				return fmt.Errorf("plain-get %s: %w", f.plain, err)
			}
			defer out.Body.Close()
			return checkStream(out.Body, f.plain, f, buf)
		}, nil
	}
	return plainCloudGet(ctx, u)
}

// noChecksum turns off the SDK's validation of response checksums.
func noChecksum(o *s3.Options) {
	o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
}
