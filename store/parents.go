package store

import (
	"net/url"
	"path"
	"strings"
)

// Ancestor is a prefix above a store URL's own, on the same store: URL
// opens it, and Rel is the store's prefix relative to it ("data/x").
type Ancestor struct {
	URL string
	Rel string
}

// Ancestors lists the prefixes above rawURL's, nearest first, up to the
// bucket or container (s3://, gs://, az://) or the filesystem root (file://), with the same query.
// Other schemes have none. It lets a caller look for a stream that would
// contain a new one (whose gc would take the new one's objects for its
// own garbage).
func Ancestors(rawURL string) []Ancestor {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil
	}
	var p string
	switch u.Scheme {
	case "file":
		p = path.Clean("/" + u.Path)
	case "s3", "gs", "az":
		p = strings.Trim(u.Path, "/")
	default:
		return nil
	}
	var out []Ancestor
	for p != "/" && p != "" && p != "." {
		dir, base := path.Split(strings.TrimSuffix(p, "/"))
		up := *u
		up.Path = "/" + strings.Trim(dir, "/")
		rel := base
		if len(out) > 0 {
			rel = base + "/" + out[len(out)-1].Rel
		}
		out = append(out, Ancestor{URL: up.String(), Rel: rel})
		p = strings.TrimSuffix(dir, "/")
		if u.Scheme == "file" && p == "" {
			p = "/"
		}
	}
	return out
}
