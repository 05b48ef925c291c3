package oracle

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
)

var rayClusterGVK = schema.GroupVersionKind{Group: "ray.io", Version: "v1", Kind: "RayCluster"}

// runSample applies one sample to both sides, each in its own namespace of the pair ns, waits for both to settle and
// returns the differences.
func runSample(t *testing.T, ns, name string, s sample, sides ...side) []diff {
	ctx := context.Background()
	for _, o := range append(slices.Clone(s.extra), s.objs...) {
		for _, sd := range sides {
			u := o.DeepCopy()
			u.SetNamespace(sd.ns(ns))
			if err := sd.cl.Create(ctx, u); err != nil {
				t.Fatalf("%s: create %s %s: %v", sd.name, u.GetKind(), u.GetName(), err)
			}
		}
	}
	return settle(t, ns, name, sides...)
}

// settleDeadline bounds one settle; a sample or step that has not settled by then fails.
const settleDeadline = 6 * time.Minute

// settle plays the submitters of both sides until both have settled, then compares what they wrote. Settled: no
// write in the namespace pair (no resourceVersion changed) since a mark, and since the mark each operator has
// drained what it had then: every controller has finished at least as many reconciles as it had queued and in
// flight at the mark, Manta holds no RayCluster status change back (manta_raycluster_statuses_held), Manta's
// unsent events (manta_events_queued) have been none for a second, and every event at
// the API server is in the cache (eventsInCache); and nothing is on its way that no operator's queue holds: no Ray
// job running on a fake head, no pod waiting for kwok or being deleted, no submitter Job waiting for the Job
// controller, no cluster suspending or whose status does not yet count its worker pods as they are, no RayJob whose
// TTL or deletion rules are still to run, no RayService with a head that is not Ready yet, no Ready head its head
// Service does not route to yet, no Ready head of a RayService's cluster without its Serve config (see
// snapshot.moving). A write moves the mark.
//
// Settled, the sides are compared; while a difference is found that differences.yaml does not list for name (the
// sample, or scenario/<name>/<step>), the polls go on until the deadline, and a write moves the mark again. KubeRay
// records its events through client-go's broadcaster, which writes them from a goroutine of its own after the
// reconcile has returned, and counts none it holds: no barrier can say that KubeRay has none left to write. An event
// of KubeRay's that is only late ends its difference when it arrives; one that never comes is reported at the
// deadline. A run that passes never waits on a clock.
func settle(t *testing.T, ns, name string, sides ...side) []diff {
	snaps := make([]*snapshot, len(sides))
	start := time.Now()
	deadline := start.Add(settleDeadline)
	var mark []operatorState
	var markReads []map[types.UID]int // each side's fake heads' Serve reads at the mark
	var eventsEmpty time.Time         // when Manta's event queue was first seen empty since the mark
	var differing time.Time           // since when the sides, settled, differ as differences.yaml does not list
	markWrites, why := "", ""
	lastLog := start
	var found []diff
	for {
		// Read before the snapshots: a reconcile that these reads prove finished wrote before the snapshot.
		reads := make([]map[types.UID]int, len(sides))
		var readsErr error
		for i, sd := range sides {
			var err error
			reads[i], err = env.heads.serveReads(context.Background(), sd.ns(ns))
			readsErr = errors.Join(readsErr, err)
		}
		writes, moving := "", ""
		unlisted := false // this poll found the sides settled and differing as differences.yaml does not list
		for i, sd := range sides {
			bindPods(t, sd, sd.ns(ns))
			env.submitters.play(t, sd, sd.ns(ns))
			snaps[i] = takeSnapshot(t, sd, sd.ns(ns))
			writes += snaps[i].writes
			if moving == "" && snaps[i].moving != "" {
				moving = sd.name + ": " + snaps[i].moving
			}
		}
		states, err := operatorStates(sides)
		switch {
		case err != nil:
			why = err.Error()
		case readsErr != nil:
			why = readsErr.Error()
		case mark == nil || writes != markWrites:
			mark, markReads, markWrites, eventsEmpty, differing, why = states, reads, writes, time.Time{}, time.Time{}, "written since the last poll"
		default:
			if eventsEmpty.IsZero() && states[1].eventsQueued == 0 {
				eventsEmpty = time.Now()
			}
			why = drained(mark, states)
			// manta_events_queued counts the event Manta's writer holds until its write has returned: at 0 every
			// event Manta recorded is at the API server, which eventsInCache then finds in the cache; the second of
			// quiet is for an event recorded in a reconcile that was still finishing at the mark.
			if why == "" && (eventsEmpty.IsZero() || time.Since(eventsEmpty) < time.Second) {
				why = "Manta's events queued since the mark are not all sent"
			}
			// A status change Manta holds back (status coalescing) waits on a timer, not in a queue: drained cannot
			// see it. Held at a poll after the mark, it is either written (a write, which moves the mark) or
			// dropped by a later reconcile; 0 with the reconciles of the mark drained, none is left.
			if why == "" && states[1].statusesHeld > 0 {
				why = fmt.Sprintf("Manta holds %.0f RayCluster status changes back", states[1].statusesHeld)
			}
			if why == "" {
				why = moving
			}
			if why == "" {
				why = servePolledSince(markReads, reads)
			}
			if why == "" {
				why = eventsInCache(t, ns, sides...)
			}
			if why == "" {
				found = snaps[0].compare(snaps[1])
				if d := env.diffs.unlisted(name, found); d != "" {
					if differing.IsZero() {
						differing = time.Now()
					}
					unlisted = true
					why = "settled with a difference not in differences.yaml, waiting for a later write: " + d
				} else {
					differing = time.Time{}
				}
			}
		}
		if why == "" {
			if os.Getenv("ORACLE_DEBUG") != "" {
				t.Logf("%s: settled after %s", ns, time.Since(start).Round(time.Millisecond))
			}
			return found
		}
		if os.Getenv("ORACLE_DEBUG") != "" && time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			t.Logf("%s: not settled after %s: %s", ns, time.Since(start).Round(time.Second), why)
		}
		if time.Now().After(deadline) {
			if unlisted {
				t.Logf("%s: settled, and no write in the %s since the first unlisted difference", ns, time.Since(differing).Round(time.Second))
				return found
			}
			t.Errorf("%s: not settled after %s (%s); compared anyway", ns, settleDeadline, why)
			logStuckReconciles(t)
			return snaps[0].compare(snaps[1])
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// servePolls is how many reads of a head's Serve applications since the mark prove that its operator has looked
// at the RayService again since then, and finished: an operator reads each head's applications once per reconcile
// (KubeRay's and Manta's RayService controllers both poll every 2 s) and never reconciles one RayService twice at
// once, so the reconcile that made the third read began after the one that made the second had ended, and that one
// began after the mark.
const servePolls = 3

// sideNames names the sides as settle gets them: KubeRay's first, then Manta's.
var sideNames = []string{"KubeRay's", "Manta's"}

// servePolledSince says which side's fake head has not been polled servePolls times since the mark: what such a
// poll finds (an application turned RUNNING, a proxy turned healthy, Endpoints the endpoint controller changed)
// an operator writes only then, on a timer no work queue shows. Empty when every head with a Serve config has.
func servePolledSince(mark, now []map[types.UID]int) string {
	for i := range now {
		for uid, n := range now[i] {
			base := mark[i][uid]
			if n < base { // a new Serve config since the mark: counted from its deploy
				base = 0
			}
			if n-base < servePolls {
				return fmt.Sprintf("%s head pod %s: its Serve applications read %d times since the last write, want %d", sideNames[i], uid, n-base, servePolls)
			}
		}
	}
	return ""
}

// eventsInCache is the settle's last barrier: the events the API server holds in each side's namespace (read from
// it, not from the cache) are all in the informer cache the snapshot reads, at the same resourceVersion. An event
// written last in a namespace (a RayJob's DeletedRayJob, recorded once the RayJob is gone: no later write moves the
// mark) may reach the API server after the snapshot's poll and the cache after that; compared without this barrier
// it is missing on one side in some runs. Empty when every event is there.
func eventsInCache(t *testing.T, ns string, sides ...side) string {
	ctx := context.Background()
	for _, sd := range sides {
		direct, cached := &corev1.EventList{}, &corev1.EventList{}
		if err := env.direct.List(ctx, direct, client.InNamespace(sd.ns(ns))); err != nil {
			return "list events: " + err.Error()
		}
		if err := sd.cl.List(ctx, cached, client.InNamespace(sd.ns(ns))); err != nil {
			t.Fatal(err)
		}
		have := map[string]string{}
		for _, e := range cached.Items {
			have[e.Name] = e.ResourceVersion
		}
		for _, e := range direct.Items {
			if have[e.Name] != e.ResourceVersion {
				return fmt.Sprintf("%s: event %s at the API server is not in the cache yet", sd.name, e.Name)
			}
		}
	}
	return ""
}

// operatorState is what one operator's /metrics say of its controllers, by controller name.
type operatorState struct {
	url          string
	backlog      map[string]float64 // queued and in flight
	done         map[string]float64 // reconciles finished, every result
	eventsQueued float64            // Manta's event writes waiting (manta_events_queued)
	statusesHeld float64            // Manta's RayCluster status changes held back (manta_raycluster_statuses_held)
}

// operatorStates reads both operators' metrics (KubeRay's, Manta's).
func operatorStates(sides []side) ([]operatorState, error) {
	var out []operatorState
	for _, sd := range sides {
		u := sd.metrics
		series, err := scrape(u)
		if err != nil {
			return nil, err
		}
		st := operatorState{url: u, backlog: map[string]float64{}, done: map[string]float64{}}
		for _, s := range series {
			switch s.name {
			case "workqueue_depth":
				st.backlog[s.labels["name"]] += s.value
			case "controller_runtime_active_workers":
				st.backlog[s.labels["controller"]] += s.value
			case "controller_runtime_reconcile_total":
				st.done[s.labels["controller"]] += s.value
			case "manta_events_queued":
				st.eventsQueued += s.value
			case "manta_raycluster_statuses_held":
				st.statusesHeld += s.value
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// drained says which controller has not yet finished what it had queued and in flight at the mark (controller-
// runtime's queue hands items out in order); empty when none.
func drained(mark, now []operatorState) string {
	for i := range mark {
		for c, backlog := range mark[i].backlog {
			if did := now[i].done[c] - mark[i].done[c]; did < backlog {
				return fmt.Sprintf("%s: controller %s has finished %.0f of the %.0f reconciles it had queued", mark[i].url, c, did, backlog)
			}
		}
	}
	return ""
}

// series is one sample of a Prometheus text exposition.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads a Prometheus text exposition (label values without escaped quotes or commas, as these are).
func scrape(u string) ([]series, error) {
	resp, err := http.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	var out []series
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		s := series{labels: map[string]string{}}
		rest := ""
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			s.name, rest = line[:i], line[j+1:]
			for _, kv := range strings.Split(line[i+1:j], ",") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					s.labels[k] = strings.Trim(v, `"`)
				}
			}
		} else {
			s.name, rest, _ = strings.Cut(line, " ")
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		if s.value, err = strconv.ParseFloat(fields[0], 64); err == nil {
			out = append(out, s)
		}
	}
	return out, sc.Err()
}

// snapshot is what one operator wrote into a namespace, normalised.
type snapshot struct {
	side    string
	pods    map[string][]map[string]any // by pod/[<cluster>/]<node-type>[:group]
	objects map[string]map[string]any   // Ray objects' status and metadata, Services, Jobs, RBAC
	// events holds, by "<object> Type/Reason", the normalised messages of the events about Ray objects.
	events map[string]map[string]bool
	// moving says what is on its way that no operator's work queue shows (empty when nothing is): a pod kwok
	// has still to start, or being deleted; a submitter Job waiting for the Job controller; a cluster suspending,
	// or whose status does not count its worker pods yet; a RayJob whose Ray job runs or whose TTL or deletion
	// rules are still to run; a RayService not yet Ready.
	moving string
	// writes lists every object's resourceVersion: a write in the namespace changes it.
	writes string
}

var (
	uidRe  = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	timeRe = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$`)
	// inTextTimeRe is a time.DateTime inside a text.
	inTextTimeRe = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\b`)
)

var (
	rayJobGVK     = schema.GroupVersionKind{Group: "ray.io", Version: "v1", Kind: "RayJob"}
	rayServiceGVK = schema.GroupVersionKind{Group: "ray.io", Version: "v1", Kind: "RayService"}
)

func listRay(t *testing.T, sd side, ns string, gvk schema.GroupVersionKind) []unstructured.Unstructured {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := sd.cl.List(context.Background(), l, client.InNamespace(ns)); err != nil {
		t.Fatalf("%s: list %s: %v", sd.name, gvk.Kind, err)
	}
	return l.Items
}

// normaliser rewrites what differs by construction between the sides: the namespace, and the names and IDs the
// operators generate at random (<owner>-<5 random> for a RayJob's or RayService's cluster, <job>-<5 random> for a
// job ID). A generated name of another shape is left as it is, so the difference shows.
func normaliser(ns string, clusters, jobs, services []unstructured.Unstructured, svcs []corev1.Service) (*strings.Replacer, map[string]string) {
	names := map[string]string{}
	var pairs []string
	generatedAs := func(owner, name, tail string) {
		if _, done := names[name]; !done && regexp.MustCompile(`^`+regexp.QuoteMeta(owner)+`-[a-z0-9]{5}$`).MatchString(name) {
			names[name] = owner + "-" + tail
			pairs = append(pairs, name, names[name])
		}
	}
	generated := func(owner, name string) { generatedAs(owner, name, "XXXXX") }
	// A RayService's pending cluster is <owner>-YYYYY, so that during an upgrade its objects do not take the
	// active cluster's names; once promoted it is <owner>-XXXXX.
	for _, o := range services {
		if n, _, _ := unstructured.NestedString(o.Object, "status", "pendingServiceStatus", "rayClusterName"); n != "" {
			generatedAs(o.GetName(), n, "YYYYY")
		}
	}
	for _, c := range clusters {
		for _, o := range c.GetOwnerReferences() {
			if o.Kind == "RayJob" || o.Kind == "RayService" {
				generated(o.Name, c.GetName())
			}
		}
	}
	// The clusters the owners name, also once deleted (a Service may still select one).
	for _, o := range slices.Concat(jobs, services) {
		for _, path := range [][]string{{"status", "rayClusterName"}, {"status", "activeServiceStatus", "rayClusterName"}} {
			if n, _, _ := unstructured.NestedString(o.Object, path...); n != "" {
				generated(o.GetName(), n)
			}
		}
	}
	// The cluster a RayJob's or RayService's Service still selects once the cluster is gone (a suspended RayJob
	// keeps its head Service, selecting the cluster it had).
	for _, svc := range svcs {
		for _, o := range svc.OwnerReferences {
			if c := svc.Spec.Selector[rayv1.LabelCluster]; (o.Kind == "RayJob" || o.Kind == "RayService") && c != "" {
				generated(o.Name, c)
			}
		}
	}

	for _, j := range jobs {
		id, _, _ := unstructured.NestedString(j.Object, "status", "jobId")
		spec, _, _ := unstructured.NestedString(j.Object, "spec", "jobId")
		if id != "" && id != spec && regexp.MustCompile(`^`+regexp.QuoteMeta(j.GetName())+`-[a-z0-9]{5}$`).MatchString(id) {
			pairs = append(pairs, id, j.GetName()+"-JOBID")
		}
	}
	return strings.NewReplacer(append(pairs, ns, "NS")...), names
}

func takeSnapshot(t *testing.T, sd side, ns string) *snapshot {
	ctx := context.Background()
	s := &snapshot{side: sd.name, pods: map[string][]map[string]any{}, objects: map[string]map[string]any{}, events: map[string]map[string]bool{}}
	var rvs []string
	saw := func(kind string, o metav1.Object) { rvs = append(rvs, kind+"/"+o.GetName()+"@"+o.GetResourceVersion()) }
	move := func(format string, args ...any) {
		if s.moving == "" {
			s.moving = fmt.Sprintf(format, args...)
		}
	}
	clusters := listRay(t, sd, ns, rayClusterGVK)
	jobs := listRay(t, sd, ns, rayJobGVK)
	services := listRay(t, sd, ns, rayServiceGVK)
	svcs := &corev1.ServiceList{}
	if err := sd.cl.List(ctx, svcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	repl, generated := normaliser(ns, clusters, jobs, services, svcs.Items)
	name := func(n string) string {
		if g, ok := generated[n]; ok {
			return g
		}
		return n
	}
	toMap := func(o any) map[string]any {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		if err := json.Unmarshal([]byte(repl.Replace(uidRe.ReplaceAllString(string(b), "UID"))), &m); err != nil {
			t.Fatal(err)
		}
		deleteFields(m, "metadata.uid", "metadata.resourceVersion", "metadata.creationTimestamp", "metadata.managedFields",
			"metadata.generation", "metadata.namespace", "metadata.deletionTimestamp", "metadata.deletionGracePeriodSeconds")
		return m
	}

	pods := &corev1.PodList{}
	if err := sd.cl.List(ctx, pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	podsOfJob := map[string]int{} // submitter Job name -> its pods that are pending or running
	workersOfCluster := map[string]int{}
	workersUp := map[string]workerCounts{} // by cluster, what its status must say of its worker pods
	headRunning := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		saw("pod", p)
		nodeType, ok := p.Labels[rayv1.LabelNodeType]
		switch {
		case p.DeletionTimestamp != nil:
			move("pod %s is being deleted", p.Name)
		case p.Status.Phase == corev1.PodPending && !unschedulable(p):
			move("pod %s is pending", p.Name)
		}
		if j := p.Labels["batch.kubernetes.io/job-name"]; j != "" && (p.Status.Phase == corev1.PodPending || p.Status.Phase == corev1.PodRunning) {
			podsOfJob[j]++
		}
		if !ok || p.DeletionTimestamp != nil {
			continue // a submitter Job's pod (the Job is compared), or a pod on its way out
		}
		if nodeType == rayv1.NodeTypeWorker {
			c := p.Labels[rayv1.LabelCluster]
			workersOfCluster[c]++
			workersUp[c] = workersUp[c].add(p)
		}
		if nodeType == rayv1.NodeTypeHead && p.Status.Phase == corev1.PodRunning {
			headRunning[p.Labels[rayv1.LabelCluster]] = true
		}
		key := "pod/" + nodeType
		if len(clusters) > 1 {
			key = "pod/" + name(p.Labels[rayv1.LabelCluster]) + "/" + nodeType
		}
		if nodeType == rayv1.NodeTypeWorker {
			key += ":" + p.Labels[rayv1.LabelGroup]
		}
		m := toMap(p)
		deleteFields(m, "metadata.name", "status", "spec.nodeName")
		dropServiceAccountToken(m)
		if v, ok := p.Labels[rayv1.LabelReplicaName]; ok {
			m["metadata"].(map[string]any)["labels"].(map[string]any)[rayv1.LabelReplicaName] = regexp.MustCompile(`-[a-z0-9]{5}$`).ReplaceAllString(v, "-XXXXX")
		}
		// Readiness is the one part of the status the operators decide (readiness probes and gates), and what
		// Services select on.
		m["status"] = map[string]any{"ready": clusterbuild.PodRunningAndReady(p)}
		s.pods[key] = append(s.pods[key], m)
	}

	for i := range svcs.Items {
		saw("service", &svcs.Items[i])
		m := toMap(&svcs.Items[i])
		if svcs.Items[i].Spec.ClusterIP != corev1.ClusterIPNone {
			deleteFields(m, "spec.clusterIP", "spec.clusterIPs")
		}
		deleteFields(m, "spec.ports.nodePort", "status")
		s.objects["service/"+repl.Replace(svcs.Items[i].Name)] = m
	}
	for _, l := range []client.ObjectList{&corev1.ServiceAccountList{}, &rbacRoleList{}, &rbacRoleBindingList{}} {
		listInto(t, sd.cl, ns, l, s.objects, toMap, repl)
	}
	batch := &batchv1.JobList{}
	if err := sd.cl.List(ctx, batch, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range batch.Items {
		b := &batch.Items[i]
		saw("job", b)
		m := toMap(b)
		deleteFields(m, "status")
		s.objects["job/"+repl.Replace(b.Name)] = m
		finished := false
		for _, c := range b.Status.Conditions {
			finished = finished || (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue
		}
		if !finished && podsOfJob[b.Name] == 0 && b.DeletionTimestamp == nil {
			move("Job %s waits for the Job controller", b.Name)
		}
	}

	snapshotPodGroups(t, sd, ns, saw, func(n string, m map[string]any) { s.objects["podgroup/"+repl.Replace(n)] = m }, toMap)

	clusterExists := map[string]bool{}
	for i := range clusters {
		rc := &clusters[i]
		saw("raycluster", rc)
		clusterExists[rc.GetName()] = true
		m := toMap(rc.Object)
		key := "raycluster/" + name(rc.GetName())
		status, _ := m["status"].(map[string]any)
		s.objects[key+".status"] = normaliseStatus(status)
		meta := map[string]any{"finalizers": m["metadata"].(map[string]any)["finalizers"]}
		if _, ok := generated[rc.GetName()]; ok {
			// Made by a RayJob or RayService: what the operator wrote is compared, not only what it did with it.
			for _, k := range []string{"name", "labels", "annotations", "ownerReferences"} {
				meta[k] = m["metadata"].(map[string]any)[k]
			}
			s.objects[key+".spec"] = m["spec"].(map[string]any)
		}
		s.objects[key+".metadata"] = meta
		if conditionTrue(rc, "RayClusterSuspending") {
			move("RayCluster %s is suspending", rc.GetName())
		}
		if why := statusBehindPods(rc, workersUp[rc.GetName()]); why != "" {
			move("RayCluster %s: %s", rc.GetName(), why)
		}
	}
	for _, objs := range [][]unstructured.Unstructured{jobs, services} {
		for i := range objs {
			o := &objs[i]
			saw(o.GetKind(), o)
			m := toMap(o.Object)
			key := strings.ToLower(o.GetKind()) + "/" + o.GetName()
			status, _ := m["status"].(map[string]any)
			s.objects[key+".status"] = normaliseStatus(status)
			s.objects[key+".metadata"] = map[string]any{"finalizers": m["metadata"].(map[string]any)["finalizers"]}
			if o.GetKind() == "RayJob" {
				if why := rayJobMoving(o, clusterExists, workersOfCluster, env.heads.holding(ns)); why != "" {
					move("RayJob %s: %s", o.GetName(), why)
				}
			} else if why := oldServiceCluster(o, clusters); why != "" {
				move("RayService %s: %s", o.GetName(), why)
			} else if c := pendingUpgrade(o); c != "" && headRunning[c] {
				// The new cluster's applications turn RUNNING and it is promoted; both write nothing meanwhile.
				move("RayService %s: upgrade to %s under way, its head runs", o.GetName(), c)
			} else if !conditionTrue(o, "Ready") {
				// With a head running, the operator polls its Serve applications until they run.
				for _, path := range [][]string{{"status", "activeServiceStatus", "rayClusterName"}, {"status", "pendingServiceStatus", "rayClusterName"}} {
					if c, _, _ := unstructured.NestedString(o.Object, path...); c != "" && headRunning[c] {
						move("RayService %s is not Ready, its cluster %s has a head", o.GetName(), c)
					}
				}
			}
		}
	}

	if why := env.heads.serveUnread(ctx, ns); why != "" {
		move("%s", why)
	}
	if why := headUnrouted(t, sd.cl, ns, pods.Items); why != "" {
		move("%s", why)
	}
	if why, err := env.heads.serveUnsent(ctx, ns); err != nil {
		move("%v", err)
	} else if why != "" {
		move("%s", why)
	}
	snapshotGatewayAPI(t, sd, ns, s, services, clusters, toMap, saw, move)

	events := &corev1.EventList{}
	if err := sd.cl.List(ctx, events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i, e := range events.Items {
		saw("event", &events.Items[i])
		key := ""
		switch e.InvolvedObject.Kind {
		case "RayCluster":
			key = "events " + e.Type + "/" + e.Reason
		case "RayJob", "RayService":
			key = "events/" + e.InvolvedObject.Kind + " " + e.Type + "/" + e.Reason
		default:
			continue
		}
		if overloaded(e.Message) {
			// The API server shed a write on the loaded machine: the failure says nothing of the operator.
			continue
		}
		if s.events[key] == nil {
			s.events[key] = map[string]bool{}
		}
		s.events[key][normaliseMessage(repl, e.Message)] = true
	}
	slices.Sort(rvs)
	s.writes = strings.Join(rvs, ",")
	return s
}

var (
	// generatedSuffixRe is the random tail of a name the API server or an operator generated (generateName's and
	// utilrand.String's alphabet has no vowels, so words such as -serve or -small are not taken for one).
	generatedSuffixRe = regexp.MustCompile(`-[bcdfghjklmnpqrstvwxz2456789]{5}\b`)
	numberRe          = regexp.MustCompile(`\d+`)
)

// overloaded says whether an event's message reports the API server timing out a request.
func overloaded(msg string) bool {
	return strings.Contains(msg, "Timeout: request did not complete within requested timeout")
}

// normaliseMessage rewrites in an event's message what differs by construction between the sides: UIDs, the
// namespace and generated names (repl), other generated name tails, times and numbers.
func normaliseMessage(repl *strings.Replacer, msg string) string {
	msg = repl.Replace(uidRe.ReplaceAllString(msg, "UID"))
	msg = generatedSuffixRe.ReplaceAllString(msg, "-XXXXX")
	msg = inTextTimeRe.ReplaceAllString(msg, "<time>")
	return numberRe.ReplaceAllString(msg, "N")
}

// workerCounts are a cluster's worker pods that are Running, and Running and Ready: what both operators report
// as availableWorkerReplicas and readyWorkerReplicas.
type workerCounts struct{ available, ready int64 }

func (w workerCounts) add(p *corev1.Pod) workerCounts {
	if p.Status.Phase == corev1.PodRunning {
		w.available++
	}
	if clusterbuild.PodRunningAndReady(p) {
		w.ready++
	}
	return w
}

// statusBehindPods says how a RayCluster's status does not yet count its worker pods as they are (pods not being
// deleted; those are on their way anyway). Both operators count them from every pod change, so a difference is a
// reconcile or a status write still to come, which no work queue need show: a reconcile put off for a moment (Manta
// batches a pod's progress events, and waits for its cache to show its own status write), or one that ran before
// the pod changed. A failed worker's replacement turning Ready is one: compared before it is counted, one side
// says one worker fewer. Empty when the status counts them, or when the cluster is being deleted (its status is
// no longer kept).
func statusBehindPods(rc *unstructured.Unstructured, pods workerCounts) string {
	if rc.GetDeletionTimestamp() != nil {
		return ""
	}
	ready, _, _ := unstructured.NestedInt64(rc.Object, "status", "readyWorkerReplicas")
	available, _, _ := unstructured.NestedInt64(rc.Object, "status", "availableWorkerReplicas")
	if ready == pods.ready && available == pods.available {
		return ""
	}
	return fmt.Sprintf("its status counts %d ready and %d available workers, its pods are %d and %d", ready, available, pods.ready, pods.available)
}

// rayJobMoving says what a RayJob still waits for that no work queue shows: its Ray job (the operator polls the
// head) unless the test holds it (held: a job of the namespace is held on its fake head) and no deadline runs,
// a suspension under way, or the TTL or the deletion rules of a finished job (a timer). Empty when nothing.
func rayJobMoving(o *unstructured.Unstructured, clusterExists map[string]bool, workers map[string]int, held bool) string {
	st, _, _ := unstructured.NestedString(o.Object, "status", "jobDeploymentStatus")
	jobStatus, _, _ := unstructured.NestedString(o.Object, "status", "jobStatus")
	cluster, _, _ := unstructured.NestedString(o.Object, "status", "rayClusterName")
	switch st {
	case "Running":
		_, deadline, _ := unstructured.NestedInt64(o.Object, "spec", "activeDeadlineSeconds")
		if held && jobStatus == "RUNNING" && !deadline {
			// Held until the test's next step releases it: the operators have nothing left to do but poll.
			return ""
		}
		return "deployment status " + st
	case "Retrying", "Suspending":
		// The operator polls the head for the Ray job, waits out a retry's delay, or tears the cluster down.
		return "deployment status " + st
	case "Complete", "Failed":
	default:
		return ""
	}
	if shutdown, _, _ := unstructured.NestedBool(o.Object, "spec", "shutdownAfterJobFinishes"); shutdown && clusterExists[cluster] {
		return "finished, its cluster is still to be deleted"
	}
	rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "deletionStrategy", "deletionRules")
	for _, r := range rules {
		rm, _ := r.(map[string]any)
		if s, _, _ := unstructured.NestedString(rm, "condition", "jobStatus"); s != jobStatus {
			continue
		}
		switch policy, _, _ := unstructured.NestedString(rm, "policy"); policy {
		case "DeleteSelf":
			return "finished, a rule deletes it"
		case "DeleteCluster":
			if clusterExists[cluster] {
				return "finished, a rule deletes its cluster"
			}
		case "DeleteWorkers":
			if workers[cluster] > 0 {
				return "finished, a rule deletes its workers"
			}
		}
	}
	return ""
}

// unschedulable says whether the scheduler found no node for the pod: it stays pending, nothing is on its way.
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// conditionTrue reports whether the object's status has the condition typ with status True.
func conditionTrue(o *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// dropServiceAccountToken removes the projected token volume the API server adds to every pod (kube-api-access-<5
// random>), and its mounts.
func dropServiceAccountToken(pod map[string]any) {
	isToken := func(e any) bool {
		m, _ := e.(map[string]any)
		n, _ := m["name"].(string)
		return strings.HasPrefix(n, "kube-api-access-")
	}
	spec, _ := pod["spec"].(map[string]any)
	if vols, ok := spec["volumes"].([]any); ok {
		spec["volumes"] = slices.DeleteFunc(vols, isToken)
	}
	for _, k := range []string{"containers", "initContainers"} {
		cs, _ := spec[k].([]any)
		for _, c := range cs {
			cm := c.(map[string]any)
			if ms, ok := cm["volumeMounts"].([]any); ok {
				cm["volumeMounts"] = slices.DeleteFunc(ms, isToken)
			}
		}
	}
}

// normaliseStatus drops what changes with every write or comes from the API server's allocations, and turns
// every other timestamp into <time>, so that a time set on one side and not the other still shows.
func normaliseStatus(status map[string]any) map[string]any {
	if status == nil {
		return map[string]any{}
	}
	deleteFields(status, "lastUpdateTime", "stateTransitionTimes", "conditions.lastTransitionTime", "head.podIP", "head.podName", "head.serviceIP",
		"rayClusterStatus.lastUpdateTime", "rayClusterStatus.stateTransitionTimes", "rayClusterStatus.conditions.lastTransitionTime",
		"rayClusterStatus.head.podIP", "rayClusterStatus.head.podName", "rayClusterStatus.head.serviceIP",
		"activeServiceStatus.rayClusterStatus.head.podIP", "activeServiceStatus.rayClusterStatus.head.podName", "activeServiceStatus.rayClusterStatus.head.serviceIP",
		"pendingServiceStatus.rayClusterStatus.head.podIP", "pendingServiceStatus.rayClusterStatus.head.podName", "pendingServiceStatus.rayClusterStatus.head.serviceIP")
	var walk func(v any) any
	walk = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		case string:
			if timeRe.MatchString(t) {
				return "<time>"
			}
			// A time inside a message (the submitter's finish time in KubeRay's submitter-finished timeout).
			return inTextTimeRe.ReplaceAllString(t, "<time>")
		}
		return v
	}
	walk(status)
	for _, eps := range []any{status["endpoints"], nestedAny(status, "rayClusterStatus", "endpoints")} {
		// Node ports are allocated at random by the API server.
		if eps, ok := eps.(map[string]any); ok {
			for k, v := range eps {
				if n, err := strconv.Atoi(fmt.Sprint(v)); err == nil && n >= 30000 && n <= 32767 {
					eps[k] = "<nodePort>"
				}
			}
		}
	}
	return status
}

func nestedAny(m map[string]any, path ...string) any {
	v, _, _ := unstructured.NestedFieldNoCopy(m, path...)
	return v
}

// compare lists what m (Manta) wrote differently from s (KubeRay).
func (s *snapshot) compare(m *snapshot) []diff {
	var out []diff
	for _, k := range slices.Sorted(maps.Keys(union(s.pods, m.pods))) {
		a, b := s.pods[k], m.pods[k]
		if len(a) != len(b) {
			out = append(out, diff{Object: k, Path: "count", KubeRay: fmt.Sprint(len(a)), Manta: fmt.Sprint(len(b))})
		}
		if len(a) == 0 || len(b) == 0 {
			continue
		}
		// Every pod of the group, paired in a stable order; a difference several pods share is listed once.
		a, b = podsInOrder(a), podsInOrder(b)
		seen := map[diff]bool{}
		for i := range min(len(a), len(b)) {
			for _, d := range compareObjects(k, a[i], b[i]) {
				if !seen[d] {
					seen[d] = true
					out = append(out, d)
				}
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(union(s.objects, m.objects))) {
		a, b := s.objects[k], m.objects[k]
		switch {
		case a == nil:
			out = append(out, diff{Object: k, Path: "exists", KubeRay: "false", Manta: "true"})
		case b == nil:
			out = append(out, diff{Object: k, Path: "exists", KubeRay: "true", Manta: "false"})
		default:
			out = append(out, compareObjects(k, a, b)...)
		}
	}
	for _, e := range slices.Sorted(maps.Keys(union(s.events, m.events))) {
		object, reason, _ := strings.Cut(e, " ")
		switch {
		case m.events[e] == nil:
			out = append(out, diff{Object: object, Path: reason, KubeRay: "recorded: " + messages(s.events[e]), Manta: "<absent>"})
		case s.events[e] == nil:
			out = append(out, diff{Object: object, Path: reason, KubeRay: "<absent>", Manta: "recorded: " + messages(m.events[e])})
		case !maps.Equal(s.events[e], m.events[e]):
			// The same event with other messages: the path is <Type/Reason>.message.
			out = append(out, diff{Object: object, Path: reason + ".message", KubeRay: messages(s.events[e]), Manta: messages(m.events[e])})
		}
	}
	return out
}

// messages renders a set of event messages, sorted.
func messages(set map[string]bool) string {
	return strings.Join(slices.Sorted(maps.Keys(set)), " | ")
}

func union[V any](a, b map[string]V) map[string]bool {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	return keys
}

// podsInOrder sorts the pods of one group so that both sides' lists pair up: by replica and host index, then by
// the whole normalised pod (readiness included).
func podsInOrder(ps []map[string]any) []map[string]any {
	type keyed struct {
		idx, all string
		pod      map[string]any
	}
	ks := make([]keyed, len(ps))
	for i, p := range ps {
		l, _ := p["metadata"].(map[string]any)["labels"].(map[string]any)
		b, _ := json.Marshal(p)
		ks[i] = keyed{idx: fmt.Sprint(l[rayv1.LabelReplicaIndex], "/", l[rayv1.LabelHostIndex]), all: string(b), pod: p}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if c := strings.Compare(a.idx, b.idx); c != 0 {
			return c
		}
		return strings.Compare(a.all, b.all)
	})
	out := make([]map[string]any, len(ks))
	for i, k := range ks {
		out[i] = k.pod
	}
	return out
}

// pendingUpgrade names the pending cluster of a RayService's NewCluster upgrade (an incremental one moves on as
// snapshotGatewayAPI says), "" when there is none.
func pendingUpgrade(o *unstructured.Unstructured) string {
	if typ, _, _ := unstructured.NestedString(o.Object, "spec", "upgradeStrategy", "type"); typ != "" && typ != string(rayv1.NewCluster) {
		return ""
	}
	pending, _, _ := unstructured.NestedString(o.Object, "status", "pendingServiceStatus", "rayClusterName")
	return pending
}

// oldServiceCluster says whether a RayService still has a cluster that is neither its active nor its pending one:
// an upgrade's old cluster, deleted once its deletion delay (a timer) has run out. Empty when none.
func oldServiceCluster(o *unstructured.Unstructured, clusters []unstructured.Unstructured) string {
	active, _, _ := unstructured.NestedString(o.Object, "status", "activeServiceStatus", "rayClusterName")
	pending, _, _ := unstructured.NestedString(o.Object, "status", "pendingServiceStatus", "rayClusterName")
	for _, c := range clusters {
		if owner := metav1.GetControllerOf(&c); owner == nil || owner.Kind != "RayService" || owner.Name != o.GetName() {
			continue
		}
		if n := c.GetName(); n != active && n != pending && c.GetDeletionTimestamp() == nil {
			return "cluster " + n + " awaits its deletion delay"
		}
	}
	return ""
}

// stuckDump makes logStuckReconciles write its dump once per run: every namespace that did not settle sees the
// same operator.
var stuckDump sync.Once

// logStuckReconciles writes the stacks of this process's goroutines (Manta's operator runs in it) to a file and logs
// the ones inside a Manta controller: a reconcile that never finishes shows where it waits.
func logStuckReconciles(t *testing.T) {
	stuckDump.Do(func() {
		var buf bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
			t.Logf("goroutine dump: %v", err)
			return
		}
		path := filepath.Join(os.TempDir(), fmt.Sprintf("manta-oracle-goroutines-%d.txt", os.Getpid()))
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Logf("goroutine dump: %v", err)
		}
		var inControllers []string
		for _, g := range strings.Split(buf.String(), "\n\n") {
			if strings.Contains(g, "/internal/controller/") {
				inControllers = append(inControllers, g)
			}
		}
		t.Logf("%d goroutines in Manta's controllers (all goroutines in %s):\n%s", len(inControllers), path, strings.Join(inControllers, "\n\n"))
	})
}

// headUnrouted says which Ready Ray head a head Service (one that selects ray.io/node-type=head) does not list among
// its ready endpoints yet; empty when none. Until the endpoints controller catches up, the API server's Service proxy
// answers "no endpoints available", and Manta looks again a second later to send the Serve config: a requeue that no
// queue metric shows, so without this barrier a step could settle before the config is sent.
func headUnrouted(t *testing.T, cl client.Client, ns string, pods []corev1.Pod) string {
	ctx := context.Background()
	svcs := &corev1.ServiceList{}
	if err := cl.List(ctx, svcs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	eps := &discoveryv1.EndpointSliceList{}
	if err := cl.List(ctx, eps, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	ready := map[string]map[string]bool{} // Service name -> addresses of its ready endpoints
	for _, es := range eps.Items {
		svc := es.Labels[discoveryv1.LabelServiceName]
		if ready[svc] == nil {
			ready[svc] = map[string]bool{}
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready == nil || *ep.Conditions.Ready {
				for _, a := range ep.Addresses {
					ready[svc][a] = true
				}
			}
		}
	}
	for _, svc := range svcs.Items {
		sel := svc.Spec.Selector
		if sel[rayv1.LabelNodeType] != rayv1.NodeTypeHead {
			continue
		}
		for i := range pods {
			p := &pods[i]
			if p.DeletionTimestamp != nil || p.Status.PodIP == "" || !clusterbuild.PodRunningAndReady(p) || !labels.SelectorFromSet(sel).Matches(labels.Set(p.Labels)) {
				continue
			}
			if !ready[svc.Name][p.Status.PodIP] {
				return fmt.Sprintf("Service %s does not route to Ready head %s yet", svc.Name, p.Name)
			}
		}
	}
	return ""
}
