package reliability

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/testutil"
)

// podLedger watches every Ray pod and remembers each one that ever existed, by UID, with whether it was
// deleted. Its own watch (an informer, which relists after a cut) sees every pod that lived long enough to be
// listed or watched; kwok keeps pods for seconds at least, so none is missed.
type podLedger struct {
	key  func(*corev1.Pod) string
	mu   sync.Mutex
	pods map[types.UID]*ledgerPod
}

type ledgerPod struct {
	key     string
	deleted bool
	// owner is the UID of the pod's controller, and created its creation time, for failure messages.
	owner   types.UID
	created time.Time
}

// rayPodGroup names a Ray pod's group: <ns>/<cluster>/<group>, with group "head" for the head.
func rayPodGroup(p *corev1.Pod) string {
	g := p.Labels[rayv1.LabelGroup]
	if p.Labels[rayv1.LabelNodeType] == rayv1.NodeTypeHead {
		g = "head"
	}
	return p.Namespace + "/" + p.Labels[rayv1.LabelCluster] + "/" + g
}

// watchRayPods follows every pod with a ray.io/cluster label, grouped by rayPodGroup.
func watchRayPods(t *testing.T, ctx context.Context, cfg *rest.Config) *podLedger {
	return watchPods(t, ctx, cfg, rayv1.LabelCluster, rayPodGroup)
}

// watchPods follows every pod that has the label, grouped by key.
func watchPods(t *testing.T, ctx context.Context, cfg *rest.Config, label string, key func(*corev1.Pod) string) *podLedger {
	t.Helper()
	scheme, err := testutil.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	req, err := labels.NewRequirement(label, selection.Exists, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultLabelSelector: labels.NewSelector().Add(*req)})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	l := &podLedger{key: key, pods: map[types.UID]*ledgerPod{}}
	record := func(obj any, deleted bool) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		e := l.pods[p.UID]
		if e == nil {
			e = &ledgerPod{key: l.key(p), created: p.CreationTimestamp.Time}
			if ref := metav1.GetControllerOf(p); ref != nil {
				e.owner = ref.UID
			}
			l.pods[p.UID] = e
		}
		if deleted || p.DeletionTimestamp != nil {
			e.deleted = true
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { record(obj, false) },
		UpdateFunc: func(_, obj any) { record(obj, false) },
		DeleteFunc: func(obj any) { record(obj, true) },
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("pod watch did not sync")
	}
	return l
}

// groupCounts is what the ledger saw of one pod group.
type groupCounts struct{ created, deleted, live int }

func (g groupCounts) String() string {
	return fmt.Sprintf("%d created, %d deleted, %d live", g.created, g.deleted, g.live)
}

// counts returns, per group key, how many pods were ever created, how many were deleted, and how many live.
func (l *podLedger) counts() map[string]groupCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]groupCounts{}
	for _, p := range l.pods {
		c := out[p.key]
		c.created++
		if p.deleted {
			c.deleted++
		} else {
			c.live++
		}
		out[p.key] = c
	}
	return out
}

// createdIn is how many pods of namespace ns the ledger has seen.
func (l *podLedger) createdIn(ns string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, p := range l.pods {
		if strings.HasPrefix(p.key, ns+"/") {
			n++
		}
	}
	return n
}

// describe lists the pods of a group: creation time, owner UID, deleted or not.
func (l *podLedger) describe(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, p := range l.pods {
		if p.key == key {
			out = append(out, fmt.Sprintf("[created %s by %s, deleted %v]", p.created.Format("15:04:05"), p.owner, p.deleted))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
