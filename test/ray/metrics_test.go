package ray_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/devcluster"
	"github.com/manta-dev/manta/internal/operator"
	"github.com/manta-dev/manta/internal/ray"
	"github.com/manta-dev/manta/internal/testutil"
)

// TestOperatorMetrics scrapes the operator's /metrics (--metrics-addr) while an HTTPMode RayJob runs on the real
// Ray head: KubeRay's series for the RayJob's cluster once it is provisioned, for the RayJob once it is Complete,
// and none of either once both are deleted.
func TestOperatorMetrics(t *testing.T) {
	cfg, cl := testutil.StartEnvtest(t)
	direct := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || !strings.HasSuffix(host, ".svc.cluster.local") {
			return nil, fmt.Errorf("test transport: unexpected address %q", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(head.DashboardPort))
	}}}
	f, err := ray.NewFactory(ray.Options{HTTPClient: direct, Timeout: defaultCallTimeout})
	if err != nil {
		t.Fatal(err)
	}
	ports, err := devcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])
	ns := startRayJobOperator(t, cfg, cl, "metrics", operator.Options{RayClients: f, MetricsAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), MetricsInsecure: true}, "10.0.0.10")

	j := newRayJob(ns, "scraped", `python -c "print('metrics')"`)
	if err := cl.Create(t.Context(), j); err != nil {
		t.Fatal(err)
	}
	running := waitRayJob(t, cl, j, "a cluster", func(j *rayv1.RayJob) bool { return j.Status.RayClusterName != "" })
	rc := &rayv1.RayCluster{}
	testutil.Eventually(t, jobTimeout, "the RayJob's cluster provisioned", func() (bool, string) {
		if err := cl.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: running.Status.RayClusterName}, rc); err != nil {
			return false, err.Error()
		}
		return meta.IsStatusConditionTrue(rc.Status.Conditions, string(rayv1.RayClusterProvisioned)), fmt.Sprint(rc.Status.Conditions)
	})
	clusterLabels := map[string]string{"name": rc.Name, "namespace": ns, "uid": string(rc.UID)}
	testutil.Eventually(t, jobTimeout, "cluster series in a scrape", func() (bool, string) {
		body := scrape(t, url)
		missing := missingSeries(body,
			want("kuberay_cluster_info", clusterLabels, "owner_kind", "RayJob"),
			want("kuberay_cluster_condition_provisioned", clusterLabels, "condition", "true"),
			want("kuberay_cluster_provisioned_duration_seconds", clusterLabels))
		return len(missing) == 0, fmt.Sprint("missing ", missing)
	})

	done := waitRayJob(t, cl, j, "Complete", func(j *rayv1.RayJob) bool { return rayv1.IsJobDeploymentTerminal(j.Status.JobDeploymentStatus) })
	if done.Status.JobDeploymentStatus != rayv1.JobDeploymentStatusComplete {
		t.Fatalf("status = %+v", done.Status)
	}
	jobLabels := map[string]string{"name": j.Name, "namespace": ns, "uid": string(done.UID)}
	testutil.Eventually(t, jobTimeout, "job series in a scrape", func() (bool, string) {
		body := scrape(t, url)
		missing := missingSeries(body,
			want("kuberay_job_info", jobLabels),
			want("kuberay_job_deployment_status", jobLabels, "deployment_status", "Complete"),
			want("kuberay_job_execution_duration_seconds", jobLabels, "job_deployment_status", "Complete", "retry_count", "0"))
		return len(missing) == 0, fmt.Sprint("missing ", missing)
	})
	t.Logf("scrape after the job completed:\n%s", grepKubeRay(scrape(t, url)))

	// envtest runs no garbage collector: delete the cluster too, as the GC would after the RayJob.
	for _, o := range []client.Object{done, rc} {
		if err := cl.Delete(t.Context(), o); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, jobTimeout, "no series of the deleted RayJob and RayCluster", func() (bool, string) {
		for _, o := range []client.Object{done, rc} {
			if err := cl.Get(t.Context(), client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("%s still exists (%v)", o.GetName(), err)
			}
		}
		var left []string
		for _, line := range strings.Split(scrape(t, url), "\n") {
			if strings.HasPrefix(line, "kuberay_") && (strings.Contains(line, `uid="`+string(done.UID)+`"`) || strings.Contains(line, `uid="`+string(rc.UID)+`"`)) {
				left = append(left, line)
			}
		}
		return len(left) == 0, fmt.Sprint("left: ", left)
	})
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(body)
}

func grepKubeRay(body string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "kuberay_") || strings.HasPrefix(line, "# TYPE kuberay_") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

type series struct {
	name   string
	labels map[string]string
}

func (s series) String() string { return fmt.Sprintf("%s%v", s.name, s.labels) }

// want is a series named name with labels base plus the extra key, value pairs.
func want(name string, base map[string]string, extra ...string) series {
	l := map[string]string{}
	for k, v := range base {
		l[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return series{name, l}
}

var seriesRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$`)
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// missingSeries returns the wanted series that the exposition text lacks: same name and exactly the labels.
func missingSeries(body string, wanted ...series) []series {
	var got []series
	for _, line := range strings.Split(body, "\n") {
		m := seriesRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		l := map[string]string{}
		for _, lm := range labelRE.FindAllStringSubmatch(m[2], -1) {
			l[lm[1]] = lm[2]
		}
		got = append(got, series{m[1], l})
	}
	var missing []series
	for _, w := range wanted {
		found := false
		for _, g := range got {
			if g.name == w.name && fmt.Sprint(g.labels) == fmt.Sprint(w.labels) {
				found = true
			}
		}
		if !found {
			missing = append(missing, w)
		}
	}
	return missing
}
