// Package optimize names the operator's performance mechanisms and switches them. Each one only makes the
// operator cheaper under load (fewer requests, reconciles or bytes decoded); with any of them off the controllers
// take the plain path and reach the same result. `manta operator --disable-optimization=<name>,...` turns them off
// (docs/operations.md); a newcomer reading the RayCluster controller can read it as if all were off.
package optimize

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// Mechanism names one performance mechanism.
type Mechanism string

// The mechanisms, with what each one does when on; docs/benchmarks.md says why each exists.
const (
	// StatusCoalescing holds back a RayCluster status change that only reports progress, to be written with the
	// next one (internal/controller/raycluster/coalesce.go). Off: every change is written at once.
	StatusCoalescing Mechanism = "status-coalescing"
	// PodEventBatching delays a RayCluster's reconcile after a pod event that only reports progress, so that a
	// cluster's pods coming up become one reconcile (raycluster/queue.go, podBatch). Off: reconciled at once.
	PodEventBatching Mechanism = "pod-event-batching"
	// ProgressPriority puts reconciles caused by a cluster's own pods and Services ahead of RayCluster events in
	// the work queue (raycluster/queue.go). Off: one priority, FIFO.
	ProgressPriority Mechanism = "progress-priority"
	// PodUpdateFilter drops pod updates that change nothing the controller reads, such as a pod's binding to a
	// node (raycluster/queue.go, podUpdateMatters). Off: every pod update is reconciled.
	PodUpdateFilter Mechanism = "pod-update-filter"
	// GoneClusterFilter drops the events of a RayCluster's pods, Services and other objects while the cluster is
	// not in the cache (raycluster/queue.go, startphases): its reconcile would find nothing. Off: each such event
	// is a reconcile of the missing cluster.
	GoneClusterFilter Mechanism = "gone-cluster-filter"
	// TemplateHashCache computes a cluster's pod template hashes once per generation (raycluster/pods.go). Off:
	// hashed on every reconcile.
	TemplateHashCache Mechanism = "template-hash-cache"
	// NewClusterLiveSkip skips the uncached read that confirms a cluster still exists before the first pods of a
	// new cluster (raycluster/controller.go, clusterLive). Off: read before the first create of every reconcile.
	NewClusterLiveSkip Mechanism = "new-cluster-live-skip"
	// MetadataWrites creates Ray pods, RayClusters' Services, a RayJob's RayCluster and head Service (and deletes
	// that RayCluster), and writes every controller's status (sending the status alone) and finalizer asking the API
	// server for the metadata alone in return (internal/controller/shared/metawrite); with no write decoding into
	// the object read, the RayJob and RayCluster controllers then read its spec from the cache in place. Off: the
	// manager's client, which sends and decodes whole objects, and the whole object copied.
	MetadataWrites Mechanism = "metadata-writes"
	// PodWatchPruning drops what the Ray pod cache does not keep from the protobuf bytes of the pod watch before
	// client-go decodes them (internal/operator/podwatch.go). Off: the cache's transform alone strips them.
	PodWatchPruning Mechanism = "pod-watch-pruning"
	// PodWatchDecoding decodes the protobuf watch events of pods in place, each pod once, handing client-go anything
	// else (internal/operator/poddecode.go). Off: client-go's watch decoding, which copies each event three times
	// before the pod is decoded.
	PodWatchDecoding Mechanism = "pod-watch-decoding"
	// CRWatchPruning cuts metadata.managedFields, which the cache drops, from the JSON watch events of Manta's
	// custom resources before client-go decodes them (internal/operator/crwatch.go). Off: the cache's transform
	// alone drops them.
	CRWatchPruning Mechanism = "cr-watch-pruning"
	// CRWatchDecoding decodes the JSON watch events of Manta's custom resources in one pass per event, each line's
	// object once, handing client-go anything else (internal/operator/crdecode.go). Off: client-go's watch decoding,
	// which reads each event about five times.
	CRWatchDecoding Mechanism = "cr-watch-decoding"
	// CRSpecSharing, where cr-watch-decoding decodes, takes the spec of a RayCluster, RayJob or RayService update
	// from the cached object it replaces when their UID and generation say it is unchanged (a status write, a
	// finalizer, a label), instead of decoding it again (internal/operator/crspec.go). Off: every event's spec is
	// decoded.
	CRSpecSharing Mechanism = "cr-spec-sharing"
	// UncompressedResponses asks the API server for its answers and watch streams without gzip
	// (rest.Config.DisableCompression): between an operator and its API server gzip costs both CPU (the API server
	// compresses every watch event it sends, the operator inflates it) and saves bandwidth nobody is short of. Off:
	// client-go's default, gzip whenever the API server offers it.
	UncompressedResponses Mechanism = "uncompressed-responses"
	// StartupPagesRelease gives back the pages of the operator's own binary once its caches have synced: the
	// kernel reclaims what starting touched, and a page used later is read back alone (internal/sys/ownpages).
	// Off: what starting mapped of the binary stays resident.
	StartupPagesRelease Mechanism = "startup-pages-release"
	// HTTP1Connections talks to the API server over HTTP/1.1 (TLS ALPN offers only http/1.1): one connection per
	// watch and per request in flight, kept alive, instead of every stream multiplexed over one HTTP/2 connection,
	// whose framing, flow control and per-stream goroutines cost both ends CPU for each request and watch event.
	// An idle connection is kept 45 s, under the API server's 90 s, so that the operator closes it first. Off:
	// client-go's default, HTTP/2 whenever the API server offers it.
	HTTP1Connections Mechanism = "http1-connections"
)

// All lists every mechanism, in the order docs/operations.md gives them.
var All = []Mechanism{StatusCoalescing, PodEventBatching, ProgressPriority, PodUpdateFilter, GoneClusterFilter, TemplateHashCache,
	NewClusterLiveSkip, MetadataWrites, PodWatchPruning, PodWatchDecoding, CRWatchPruning, CRWatchDecoding, CRSpecSharing,
	UncompressedResponses, StartupPagesRelease, HTTP1Connections}

// Switches says which mechanisms are on, and counts how often each changed what the operator did (tests read the
// counts to prove a mechanism off never acted). The nil *Switches has every mechanism on.
type Switches struct {
	off   map[Mechanism]bool
	acted map[Mechanism]*atomic.Int64
}

// Parse builds Switches with the named mechanisms off; an unknown name is an error naming the known ones.
func Parse(disabled []string) (*Switches, error) {
	s := &Switches{off: map[Mechanism]bool{}, acted: map[Mechanism]*atomic.Int64{}}
	for _, m := range All {
		s.acted[m] = &atomic.Int64{}
	}
	for _, n := range disabled {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(All, Mechanism(n)) {
			return nil, fmt.Errorf("unknown optimization %q (known: %s)", n, Names())
		}
		s.off[Mechanism(n)] = true
	}
	return s, nil
}

// Off builds Switches with the given mechanisms off.
func Off(ms ...Mechanism) *Switches {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = string(m)
	}
	s, err := Parse(names)
	if err != nil {
		panic(err)
	}
	return s
}

// Names lists the mechanisms' names, comma-separated.
func Names() string {
	names := make([]string, len(All))
	for i, m := range All {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}

// On says whether m is on.
func (s *Switches) On(m Mechanism) bool { return s == nil || !s.off[m] }

// Acted records that m changed what the operator did (held a write, delayed or dropped an event, skipped a
// request or a computation).
func (s *Switches) Acted(m Mechanism) {
	if s != nil {
		if c := s.acted[m]; c != nil {
			c.Add(1)
		}
	}
}

// Count is how often m acted.
func (s *Switches) Count(m Mechanism) int64 {
	if s == nil || s.acted[m] == nil {
		return 0
	}
	return s.acted[m].Load()
}
