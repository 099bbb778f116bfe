package mount

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lakestream/lakestream/txn"
)

// metrics is the mount's Prometheus registry. Counters the cache keeps
// itself are read at scrape time; only the GET latency histogram is fed
// directly.
type metrics struct {
	reg        *prometheus.Registry
	getLatency prometheus.Histogram
}

func newMetrics() *metrics {
	return &metrics{
		reg: prometheus.NewRegistry(),
		getLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lakefs_mount_get_seconds",
			Help:    "Latency of ranged GETs of pack blocks from the store.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
}

func (x *metrics) observeGet(d time.Duration) { x.getLatency.Observe(d.Seconds()) }

// register adds the mount's metrics to the registry.
func (x *metrics) register(m *mounted) {
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	stats := m.cache.Stats
	x.reg.MustRegister(
		x.getLatency,
		counter("lakefs_mount_cache_hits_total", "Block reads served without a new GET (cached, staged or joining one in flight).",
			func() float64 { return float64(stats().Hits) }),
		counter("lakefs_mount_cache_misses_total", "Block reads that started a GET.",
			func() float64 { return float64(stats().Misses) }),
		counter("lakefs_mount_gets_total", "GETs of pack blocks, retries and refetches included.",
			func() float64 { return float64(stats().Gets) }),
		counter("lakefs_mount_bytes_fetched_total", "Bytes received from the store.",
			func() float64 { return float64(stats().BytesFetched) }),
		counter("lakefs_mount_bytes_served_total", "Bytes returned to readers.",
			func() float64 { return float64(stats().BytesServed) }),
		counter("lakefs_mount_verify_failures_total", "Blocks whose bytes failed CRC32C verification (each GET counts).",
			func() float64 { return float64(stats().VerifyFailures) }),
		gauge("lakefs_mount_prefetch_bytes", "Bytes of prefetched blocks held or in flight, not yet read.",
			func() float64 { return float64(stats().PrefetchBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lakefs_mount_opens_total",
			Help: "Files opened, by the path that serves them: passthrough (a verified memfd the kernel reads) or blocks.", ConstLabels: prometheus.Labels{"path": "passthrough"}},
			func() float64 { n, _ := m.root.Opens(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "lakefs_mount_opens_total",
			Help: "Files opened, by the path that serves them: passthrough (a verified memfd the kernel reads) or blocks.", ConstLabels: prometheus.Labels{"path": "blocks"}},
			func() float64 { _, n := m.root.Opens(); return float64(n) }),
		gauge("lakefs_mount_memfile_bytes", "Bytes of whole files held in memfds (open, prefetched or recently read).",
			func() float64 { return float64(m.cache.Files().Stats().Bytes) }),
		gauge("lakefs_mount_memfile_peak_bytes", "The most bytes ever held in memfds.",
			func() float64 { return float64(m.cache.Files().Stats().Peak) }),
		gauge("lakefs_mount_passthrough_active", "1 when files are served by FUSE passthrough from memfds.",
			func() float64 {
				if m.cache.Files() != nil {
					return 1
				}
				return 0
			}),
		gauge("lakefs_mount_prefetch_depth_steps", "Steps beyond the reader's position being prefetched.",
			func() float64 { return float64(m.prefetch.Depth()) }),
		gauge("lakefs_mount_head_step", "Highest committed step the mount shows (-1 before the first commit).",
			func() float64 {
				h, ok := m.view.Load().Head()
				if !ok {
					return -1
				}
				return float64(h)
			}),
		gauge("lakefs_mount_manifest_version", "Manifest version the mount shows.",
			func() float64 { return float64(m.view.Load().Version) }),
		gauge("lakefs_mount_highest_step_read", "Highest step read through the mount (-1 before the first read).",
			func() float64 { return float64(m.highest.Load()) }),
		counter("lakefs_mount_log_polls_total", "Refreshes of the manifest log (each one GET or more).",
			func() float64 { return float64(m.polls.Load()) }),
		counter("lakefs_mount_heartbeat_failures_total", "Heartbeats not written (store error, or the stream gone from the store).",
			func() float64 { return float64(m.heartbeatFailures.Load()) }),
		gauge("lakefs_mount_healthy", "1 when /health answers ok, 0 when degraded.",
			func() float64 {
				if m.health() != "" {
					return 0
				}
				return 1
			}),
	)
}

// registerDegraded adds lakefs_mount_degraded{source}: 1 while that
// source's store calls fail, 0 from its first success on.
func (x *metrics) registerDegraded(src sources) {
	for _, s := range src.all() {
		x.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lakefs_mount_degraded",
			Help:        "1 while the mount's store calls of this source (index, block, log, heartbeat) are failing, 0 from the first success on.",
			ConstLabels: prometheus.Labels{"source": s.Name()}},
			func() float64 {
				if _, _, ok := s.Degraded(); ok {
					return 1
				}
				return 0
			}))
	}
}

// health says what is wrong with the mount, "" when nothing is.
func (m *mounted) health() string {
	var why []string
	if err := m.replaced.Load(); err != nil {
		why = append(why, fmt.Sprintf("stream replaced; remount (%v)", *err))
	}
	if m.streamGone.Load() {
		why = append(why, "the stream's "+txn.StreamKey+" is gone from the store (deleted?); serving the last good state")
	}
	if d := m.src.degraded(); d != "" {
		why = append(why, d)
	}
	return strings.Join(why, "; ")
}

// serve serves the metrics server on ln in the background until it is
// closed, and logs the address it took (--metrics-addr :0 picks a port).
func (x *metrics) serve(ln net.Listener, profiling bool, health func() string, log *slog.Logger) *http.Server {
	log.Info("serving metrics", "addr", ln.Addr().String(), "paths", "/metrics /health")
	srv := x.server(profiling, health)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return srv
}

// server serves /metrics, /health (200 "ok", or 503 and what is wrong, from
// health: "" when healthy) and, when profiling, Go's /debug/pprof/ handlers.
func (x *metrics) server(profiling bool, health func() string) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(x.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		if why := health(); why != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "degraded: %s\n", why)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}
