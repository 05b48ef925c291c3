package envtest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/controller/shared/optimize"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/testutil"
)

// runRecordingCreates runs an operator with sw on namespace ns (created here) of the envtest, recording the Accept
// header of each of its POSTs to that namespace's resource; accepts returns them so far.
func runRecordingCreates(t *testing.T, cfg *rest.Config, cl client.Client, ns, resource string, sw *optimize.Switches) (context.Context, context.CancelFunc, func() []string) {
	t.Helper()
	if err := cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var accepts []string
	rcfg := rest.CopyConfig(cfg)
	rcfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/namespaces/"+ns+"/"+resource) {
				mu.Lock()
				accepts = append(accepts, r.Header.Get("Accept"))
				mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	})
	opts := operator.Options{WatchNamespaces: []string{ns}, SkipNameValidation: true, Optimizations: sw}
	mgr, err := operator.NewManager(rcfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := operator.Setup(mgr, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.RunManager(t, mgr))
	return ctx, cancel, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), accepts...)
	}
}

// checkMetadataCreates fails unless some create of what was seen and each asked for metadata alone exactly when on.
func checkMetadataCreates(t *testing.T, what string, accepts []string, on bool) {
	t.Helper()
	if len(accepts) == 0 {
		t.Fatalf("metadata-writes on=%v: no %s create seen", on, what)
	}
	for _, a := range accepts {
		if strings.Contains(a, "as=PartialObjectMetadata") != on {
			t.Errorf("metadata-writes on=%v: a %s create accepting %q", on, what, a)
		}
	}
}

// With metadata-writes on, the RayJob controller creates its RayCluster asking for the metadata alone in return
// (and counts the act); off, through the manager's client, which asks for the whole object.
func TestRayJobClusterCreateMetadata(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	for _, on := range []bool{true, false} {
		sw, ns := optimize.Off(), "metacreate-on"
		if !on {
			sw, ns = optimize.Off(optimize.MetadataWrites), "metacreate-off"
		}
		ctx, cancel, accepts := runRecordingCreates(t, cfg, cl, ns, "rayclusters", sw)
		job := testutil.MakeRayJob(ns, "job").Obj()
		if err := cl.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
		var rc rayv1.RayCluster
		testutil.Eventually(t, time.Minute, "the RayJob's cluster", func() (bool, string) {
			var j rayv1.RayJob
			if err := cl.Get(ctx, client.ObjectKeyFromObject(job), &j); err != nil || j.Status.RayClusterName == "" {
				return false, "no cluster name yet"
			}
			err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: j.Status.RayClusterName}, &rc)
			return err == nil, "cluster " + j.Status.RayClusterName
		})
		cancel()
		checkMetadataCreates(t, "RayCluster", accepts(), on)
		// On, the RayCluster controller's pod creates count too: the Accept above is the RayJob's own.
		if on && sw.Count(optimize.MetadataWrites) == 0 || !on && sw.Count(optimize.MetadataWrites) != 0 {
			t.Errorf("metadata-writes on=%v acted %d times", on, sw.Count(optimize.MetadataWrites))
		}
		if !metav1.IsControlledBy(&rc, job) {
			t.Errorf("the cluster %s is not the job's: %+v", rc.Name, rc.OwnerReferences)
		}
	}
}

// With metadata-writes on, the RayCluster controller creates the cluster's Services asking for their metadata alone
// in return; either way the status comes to name the head Service, its cluster IP and node ports, which the
// metadata-only create does not read back (the cache's copy does).
func TestRayClusterServiceCreateMetadata(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	for _, on := range []bool{true, false} {
		sw, ns := optimize.Off(), "svccreate-on"
		if !on {
			sw, ns = optimize.Off(optimize.MetadataWrites), "svccreate-off"
		}
		ctx, cancel, accepts := runRecordingCreates(t, cfg, cl, ns, "services", sw)
		// A NodePort head Service: the API server gives it a cluster IP and node ports, which the status reports.
		rc := testutil.MakeRayCluster(ns, "c").Obj()
		rc.Spec.HeadGroupSpec.ServiceType = corev1.ServiceTypeNodePort
		if err := cl.Create(ctx, rc); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, time.Minute, "the status names the head Service, its cluster IP and node ports", func() (bool, string) {
			var c rayv1.RayCluster
			if err := cl.Get(ctx, client.ObjectKeyFromObject(rc), &c); err != nil {
				return false, err.Error()
			}
			var svcs corev1.ServiceList
			if err := cl.List(ctx, &svcs, client.InNamespace(ns)); err != nil || len(svcs.Items) == 0 {
				return false, "no Service yet"
			}
			svc := svcs.Items[0]
			ports := len(svc.Spec.Ports) > 0
			for _, p := range svc.Spec.Ports {
				ports = ports && p.NodePort != 0 && c.Status.Endpoints[p.Name] == fmt.Sprint(p.NodePort)
			}
			return c.Status.Head.ServiceName == svc.Name && svc.Spec.ClusterIP != "" && c.Status.Head.ServiceIP == svc.Spec.ClusterIP && ports,
				fmt.Sprintf("head %+v, endpoints %v; Service %s at %s, ports %+v", c.Status.Head, c.Status.Endpoints, svc.Name, svc.Spec.ClusterIP, svc.Spec.Ports)
		})
		cancel()
		checkMetadataCreates(t, "Service", accepts(), on)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
