package bench

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"google.golang.org/api/option"
)

// The plain baselines on gs:// and az://: the cloud's SDK with its
// defaults, one call per object, nothing of Lakestream in the path. They
// read the store URL as the store does (endpoint=, account=) and the same
// credentials from the environment.

// plainGCS is a bucket handle and the stream's key prefix.
func plainGCS(ctx context.Context, u *url.URL) (*storage.BucketHandle, string, error) {
	var opts []option.ClientOption
	if e := u.Query().Get("endpoint"); e != "" {
		opts = append(opts, option.WithEndpoint(strings.TrimSuffix(e, "/")+"/storage/v1/"), storage.WithJSONReads())
		if strings.HasPrefix(e, "http://") {
			opts = append(opts, option.WithoutAuthentication())
		}
	}
	client, err := storage.NewClient(ctx, append(opts, storage.WithDisabledClientMetrics())...)
	if err != nil {
		return nil, "", fmt.Errorf("plain GCS client: %w", err)
	}
	return client.Bucket(u.Host), keyPrefix(u), nil
}

// plainAzure is a container client and the stream's key prefix.
func plainAzure(u *url.URL) (*container.Client, string, error) {
	q := u.Query()
	account := q.Get("account")
	if account == "" {
		account = os.Getenv("AZURE_STORAGE_ACCOUNT")
	}
	svc := q.Get("endpoint")
	if svc == "" {
		svc = "https://" + account + ".blob.core.windows.net"
	}
	svc = strings.TrimSuffix(svc, "/") + "/"
	var client *azblob.Client
	var err error
	if key := os.Getenv("AZURE_STORAGE_KEY"); key != "" {
		cred, kerr := azblob.NewSharedKeyCredential(account, key)
		if kerr != nil {
			return nil, "", fmt.Errorf("plain Azure client: %w", kerr)
		}
		client, err = azblob.NewClientWithSharedKeyCredential(svc, cred, nil)
	} else {
		cred, cerr := azidentity.NewDefaultAzureCredential(nil)
		if cerr != nil {
			return nil, "", fmt.Errorf("plain Azure client: %w", cerr)
		}
		client, err = azblob.NewClient(svc, cred, nil)
	}
	if err != nil {
		return nil, "", fmt.Errorf("plain Azure client: %w", err)
	}
	return client.ServiceClient().NewContainerClient(u.Host), keyPrefix(u), nil
}

func keyPrefix(u *url.URL) string {
	if p := strings.Trim(u.Path, "/"); p != "" {
		return p + "/"
	}
	return ""
}

// plainGCSPut is one SDK upload per part.
func plainGCSPut(ctx context.Context, u *url.URL) (putFunc, error) {
	b, prefix, err := plainGCS(ctx, u)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, key string, data []byte) error {
		w := b.Object(prefix + key).NewWriter(ctx)
		if _, err := w.Write(data); err != nil {
			_ = w.Close()
			return err
		}
		return w.Close()
	}, nil
}

// plainAzurePut is one SDK UploadBuffer per part.
func plainAzurePut(u *url.URL) (putFunc, error) {
	c, prefix, err := plainAzure(u)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, key string, data []byte) error {
		_, err := c.NewBlockBlobClient(prefix+key).UploadBuffer(ctx, data, nil)
		return err
	}, nil
}

// plainCloudGet is plain-get's reader on gs:// and az://.
func plainCloudGet(ctx context.Context, u *url.URL) (plainGetFunc, error) {
	switch u.Scheme {
	case "gs":
		b, prefix, err := plainGCS(ctx, u)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, f benchFile, buf []byte) error {
			r, err := b.Object(prefix + f.plain).NewReader(ctx)
			if err != nil {
				return fmt.Errorf("plain-get %s: %w", f.plain, err)
			}
			defer r.Close()
			return checkStream(r, f.plain, f, buf)
		}, nil
	case "az":
		c, prefix, err := plainAzure(u)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, f benchFile, buf []byte) error {
			resp, err := c.NewBlobClient(prefix+f.plain).DownloadStream(ctx, nil)
			if err != nil {
				return fmt.Errorf("plain-get %s: %w", f.plain, err)
			}
			defer resp.Body.Close()
			return checkStream(resp.Body, f.plain, f, buf)
		}, nil
	}
	return nil, fmt.Errorf("plain-get: no plain reader for %s stores; use file://, s3://, gs:// or az://", u.Scheme)
}
