// cadvisor: cAdvisor's container manager and Prometheus exporter, without its web UI.
//
// Upstream's command (github.com/google/cadvisor/cmd) is a module of its own that the Go module
// proxy here does not serve; the library (github.com/google/cadvisor) is served. This main is
// modelled on upstream's cmd/cadvisor.go: an in-memory cache, manager.New, and /metrics from
// metrics.NewPrometheusCollector. Container plugins: raw (cgroups, always compiled in) and
// podman (its --podman flag names the socket). The library's own flags (--podman,
// --docker_only, --housekeeping_interval, --disable_root_cgroup_stats, klog's -v, ...) stay
// available, because its packages register them on the standard flag set.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/cadvisor/cache/memory"
	"github.com/google/cadvisor/container"
	_ "github.com/google/cadvisor/container/podman/install"
	v2 "github.com/google/cadvisor/info/v2"
	"github.com/google/cadvisor/manager"
	"github.com/google/cadvisor/metrics"
	"github.com/google/cadvisor/utils/sysfs"
	"github.com/google/cadvisor/version"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

var (
	listenIP    = flag.String("listen_ip", "", "IP to listen on (default: all)")
	port        = flag.Int("port", 8080, "port to serve /metrics and /healthz on")
	showVersion = flag.Bool("version", false, "print the cAdvisor library version and exit")
	storageAge  = flag.Duration("storage_duration", 2*time.Minute, "how long stats are kept in memory")
	rawPrefixes = flag.String("raw_cgroup_prefix_whitelist", "",
		"comma-separated cgroup path prefixes collected even with --docker_only")
	// The same metrics upstream leaves out by default: costly, and nothing here reads them.
	ignoreMetrics = container.MetricSet{
		container.MemoryNumaMetrics:              struct{}{},
		container.NetworkTcpUsageMetrics:         struct{}{},
		container.NetworkUdpUsageMetrics:         struct{}{},
		container.NetworkAdvancedTcpUsageMetrics: struct{}{},
		container.ProcessSchedulerMetrics:        struct{}{},
		container.ProcessMetrics:                 struct{}{},
		container.HugetlbUsageMetrics:            struct{}{},
		container.ReferencedMemoryMetrics:        struct{}{},
		container.CPUTopologyMetrics:             struct{}{},
		container.ResctrlMetrics:                 struct{}{},
		container.CPUSetMetrics:                  struct{}{},
		container.PerfMetrics:                    struct{}{},
	}
)

func init() {
	flag.Var(&ignoreMetrics, "disable_metrics",
		"comma-separated metrics to leave out; options: "+container.AllMetrics.String())
}

func main() {
	klog.InitFlags(nil)
	defer klog.Flush()
	flag.Parse()
	if *showVersion {
		fmt.Printf("cAdvisor version %s (sparkrack build of the library)\n", version.Info["version"])
		return
	}
	included := container.AllMetrics.Difference(ignoreMetrics)
	manager, err := newManager(included)
	if err != nil {
		klog.Fatalf("cadvisor: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsHandler(manager, included))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	if err := manager.Start(); err != nil {
		klog.Fatalf("cadvisor: starting the container manager: %v", err)
	}
	stopOnSignal(manager)
	address := fmt.Sprintf("%s:%d", *listenIP, *port)
	klog.Infof("cadvisor %s serving /metrics on %s", version.Info["version"], address)
	klog.Fatal(http.ListenAndServe(address, mux))
}

func newManager(included container.MetricSet) (manager.Manager, error) {
	cache := memory.New(*storageAge, nil)
	// No collector endpoints are configured, so the client is never used for TLS.
	client := &http.Client{Timeout: 10 * time.Second}
	return manager.New(cache, sysfs.NewRealSysFs(), manager.HousekeepingConfigFlags, included,
		client, strings.Split(*rawPrefixes, ","), nil, "", 0)
}

func metricsHandler(m manager.Manager, included container.MetricSet) http.Handler {
	registry := prometheus.NewRegistry()
	// Every container's latest sample, subcontainers included, as upstream and the kubelet ask.
	options := v2.RequestOptions{IdType: v2.TypeName, Count: 1, Recursive: true}
	registry.MustRegister(
		metrics.NewPrometheusCollector(m, metrics.DefaultContainerLabels, included,
			clock.RealClock{}, options),
		metrics.NewPrometheusMachineCollector(m, included),
	)
	return promhttp.HandlerFor(registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

func stopOnSignal(m manager.Manager) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		if err := m.Stop(); err != nil {
			klog.Errorf("cadvisor: stopping the container manager: %v", err)
		}
		klog.Infof("cadvisor: exiting on %v", sig)
		os.Exit(0)
	}()
}
