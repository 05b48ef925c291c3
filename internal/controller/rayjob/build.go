package rayjob

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/clusterbuild"
	"github.com/manta-dev/manta/internal/ray"
)

// ownerRef makes the RayJob the controller of what it creates, so deleting it deletes them.
func ownerRef(j *rayv1.RayJob) metav1.OwnerReference {
	return *metav1.NewControllerRef(j, rayv1.GroupVersion.WithKind(clusterbuild.KindRayJob))
}

// originLabels mark objects made for a RayJob (kuberay-compat.md §2).
func originLabels(j *rayv1.RayJob) map[string]string {
	return map[string]string{
		rayv1.LabelOriginCRD:    clusterbuild.KindRayJob,
		rayv1.LabelOriginCRName: j.Name,
	}
}

// ClusterFor builds the RayCluster a RayJob creates from spec.rayClusterSpec. The RayJob's labels and annotations
// are carried over (Kueue and users select on them), with KubeRay's origin and ray.io/job-submission-mode labels on
// top; SidecarMode adds the submitter container to the head and KubeRay's annotation that keeps a finished head down.
func ClusterFor(j *rayv1.RayJob, name string) *rayv1.RayCluster {
	labels := maps.Clone(j.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, originLabels(j))
	labels[rayv1.LabelJobSubmissionMode] = string(submissionMode(j))
	annotations := maps.Clone(j.Annotations)
	spec := j.Spec.RayClusterSpec.DeepCopy()
	if submissionMode(j) == rayv1.SidecarMode {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[rayv1.LabelDisableProvisionedHeadRestart] = "true"
		head := &spec.HeadGroupSpec.Template.Spec
		// The head runs once: a restarted head would have lost the job its sidecar submitted.
		head.RestartPolicy = corev1.RestartPolicyNever
		c := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: j.Namespace}, Spec: *spec}
		address := "http://127.0.0.1:" + strconv.Itoa(int(ray.DashboardPort(clusterbuild.HeadService(c))))
		sub := submitterContainer(j, headImage(spec), address)
		// `ray job submit` reads the token from the environment, as Ray's CLI does.
		clusterbuild.AddAuthEnv(&sub, c)
		head.Containers = append(head.Containers, sub)
	}
	return &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: j.Namespace, Labels: labels, Annotations: clusterbuild.Stamp(annotations),
			OwnerReferences: []metav1.OwnerReference{ownerRef(j)},
		},
		Spec: *spec,
	}
}

func headImage(spec *rayv1.RayClusterSpec) string {
	if cs := spec.HeadGroupSpec.Template.Spec.Containers; len(cs) > 0 {
		return cs[clusterbuild.RayContainerIndex].Image
	}
	return ""
}

// SubmitterJobName is the submitter Job's name: the RayJob's.
func SubmitterJobName(j *rayv1.RayJob) string { return j.Name }

// SubmitterJob builds the K8sJobMode submitter: from spec.submitterPodTemplate, or a default pod running the head's
// image. Its first container gets the submit command unless it brings its own, and always the address env vars.
func SubmitterJob(j *rayv1.RayJob, cluster *rayv1.RayCluster, address string) *batchv1.Job {
	var tmpl corev1.PodTemplateSpec
	if j.Spec.SubmitterPodTemplate != nil {
		tmpl = *j.Spec.SubmitterPodTemplate.DeepCopy()
	} else {
		tmpl.Spec.Containers = []corev1.Container{{Name: SubmitterContainerName, Image: headImage(&cluster.Spec), Resources: defaultSubmitterResources()}}
	}
	if tmpl.Spec.RestartPolicy == "" {
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	if len(tmpl.Spec.Containers) > 0 {
		c := &tmpl.Spec.Containers[0]
		if c.Image == "" {
			c.Image = headImage(&cluster.Spec)
		}
		if len(c.Command) == 0 && len(c.Args) == 0 {
			c.Command, c.Args = submitCommand(j, address)
		}
		c.Env = mergeEnv(c.Env, submitterEnv(j, address))
		clusterbuild.AddAuthEnv(c, cluster)
		clusterbuild.AddAuthVolume(&tmpl.Spec, cluster)
	}
	// The Job carries the origin labels; its pods get the Job controller's own labels only, as KubeRay's do.
	labels := originLabels(j)
	labels[rayv1.LabelCreatedBy] = rayv1.CreatedByValue
	backoff := DefaultSubmitterBackoffLimit
	if sc := j.Spec.SubmitterConfig; sc != nil && sc.BackoffLimit != nil {
		backoff = *sc.BackoffLimit
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: SubmitterJobName(j), Namespace: j.Namespace, Labels: labels, Annotations: clusterbuild.Stamp(nil),
			OwnerReferences: []metav1.OwnerReference{ownerRef(j)},
		},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To(backoff), Template: tmpl},
	}
}

func defaultSubmitterResources() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("200Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
}

// submitterContainer is the SidecarMode container in the head pod.
func submitterContainer(j *rayv1.RayJob, image, address string) corev1.Container {
	command, args := submitCommand(j, address)
	return corev1.Container{
		Name: SubmitterContainerName, Image: image,
		Command:   command,
		Args:      args,
		Env:       submitterEnv(j, address),
		Resources: defaultSubmitterResources(),
	}
}

func submitterEnv(j *rayv1.RayJob, address string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "PYTHONUNBUFFERED", Value: "1"},
		// host:port, as KubeRay sets it (status.dashboardURL): scripts write http://$RAY_DASHBOARD_ADDRESS.
		{Name: "RAY_DASHBOARD_ADDRESS", Value: strings.TrimPrefix(strings.TrimPrefix(address, "http://"), "https://")},
		{Name: "RAY_JOB_SUBMISSION_ID", Value: jobID(j)},
	}
}

// jobID is the submission ID the job runs under: the recorded one, else the user's.
func jobID(j *rayv1.RayJob) string {
	if j.Status.JobId != "" {
		return j.Status.JobId
	}
	return j.Spec.JobId
}

// mergeEnv sets add over env: a variable of the same name is replaced, others are kept in order.
func mergeEnv(env, add []corev1.EnvVar) []corev1.EnvVar {
	out := make([]corev1.EnvVar, 0, len(env)+len(add))
	names := map[string]bool{}
	for _, e := range add {
		names[e.Name] = true
	}
	for _, e := range env {
		if !names[e.Name] {
			out = append(out, e)
		}
	}
	return append(out, add...)
}

// submitCommand runs SubmitScript as KubeRay runs its submit command: bash -ce, so a failed step fails the pod.
func submitCommand(j *rayv1.RayJob, address string) (command, args []string) {
	return []string{"/bin/bash", "-ce", "--"}, []string{SubmitScript(j, address)}
}

// SubmitScript is the submitter's shell script: wait until the head takes jobs (headReadyWait, printing why not), submit under
// the RayJob's submission ID unless Ray already has that submission (a retried pod must not run the job twice),
// then follow the logs. The entrypoint is the user's shell command, as with `ray job submit -- <entrypoint>`.
func SubmitScript(j *rayv1.RayJob, address string) string {
	id := shellQuote(jobID(j))
	addr := shellQuote(address)
	var b strings.Builder
	fmt.Fprintf(&b, "python -c %s %s\n", shellQuote(headReadyWait), addr)
	submit := []string{"ray", "job", "submit", "--address", addr, "--no-wait", "--submission-id", id}
	if env, _ := ray.RuntimeEnvFromYAML(j.Spec.RuntimeEnvYAML); env != nil {
		b, _ := json.Marshal(env)
		submit = append(submit, "--runtime-env-json", shellQuote(string(b)))
	}
	if len(j.Spec.Metadata) > 0 {
		b, _ := json.Marshal(j.Spec.Metadata)
		submit = append(submit, "--metadata-json", shellQuote(string(b)))
	}
	if j.Spec.EntrypointNumCpus > 0 {
		submit = append(submit, "--entrypoint-num-cpus", formatFloat(j.Spec.EntrypointNumCpus))
	}
	if j.Spec.EntrypointNumGpus > 0 {
		submit = append(submit, "--entrypoint-num-gpus", formatFloat(j.Spec.EntrypointNumGpus))
	}
	if r, _ := entrypointResources(j.Spec.EntrypointResources); len(r) > 0 {
		b, _ := json.Marshal(r) // keys sorted: the script, and so the Job, is the same every time
		submit = append(submit, "--entrypoint-resources", shellQuote(string(b)))
	}
	submit = append(submit, "--", j.Spec.Entrypoint)
	fmt.Fprintf(&b, "if ! ray job status --address %s %s >/dev/null 2>&1; then %s; fi\n", addr, id, strings.Join(submit, " "))
	fmt.Fprintf(&b, "ray job logs --address %s --follow %s", addr, id)
	return b.String()
}

// headReadyWait waits until the dashboard at argv[1] answers that its GCS is healthy and lists the head node alive,
// checking every half second in one process (a Python start per check costs the submitter's small CPU share more
// than the wait), saying why it waits every 5 s; with argv[2] "once" it checks once and exits 0 or 1. The
// dashboard answers before the head's raylet registers, and a job submitted then fails (see
// ray.DashboardClient.HeadNodeAlive). It is the check the operator makes before an early start (headReady).
const headReadyWait = `import json, os, sys, time, urllib.error, urllib.request
a, once = sys.argv[1], sys.argv[2:] == ['once']
q = '/api/v0/nodes?limit=1&detail=false&filter_keys=is_head_node&filter_predicates=%3D&filter_values=true&filter_keys=state&filter_predicates=%3D&filter_values=ALIVE'
tok = os.environ.get('RAY_AUTH_TOKEN')
h = {'x-ray-authorization': 'Bearer ' + tok} if tok else {}
get = lambda p: urllib.request.urlopen(urllib.request.Request(a + p, headers=h), timeout=5).read()
said = 0
while True:
    try:
        ok, why = b'success' in get('/api/gcs_healthz') and json.loads(get(q))['data']['result']['num_filtered'] > 0, 'its GCS does not list the head node alive yet'
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            print('the Ray head at %s refused the submitter: %s' % (a, e), file=sys.stderr)
            sys.exit(1)
        ok, why = False, e
    except Exception as e:
        ok, why = False, e
    if ok or once:
        sys.exit(0 if ok else 1)
    if time.time() - said >= 5:
        print('waiting for the Ray head at %s: %s' % (a, why), file=sys.stderr, flush=True)
        said = time.time()
    time.sleep(0.5)`

func formatFloat(f float32) string { return strconv.FormatFloat(float64(f), 'f', -1, 32) }

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// SubmitRequest is what HTTPMode sends to the Jobs API.
func SubmitRequest(j *rayv1.RayJob) (ray.JobSubmitRequest, error) {
	env, err := ray.RuntimeEnvFromYAML(j.Spec.RuntimeEnvYAML)
	if err != nil {
		return ray.JobSubmitRequest{}, err
	}
	res, err := entrypointResources(j.Spec.EntrypointResources)
	if err != nil {
		return ray.JobSubmitRequest{}, fmt.Errorf("entrypointResources: %w", err)
	}
	return ray.JobSubmitRequest{
		Entrypoint: j.Spec.Entrypoint, SubmissionID: jobID(j), RuntimeEnv: env, Metadata: j.Spec.Metadata,
		EntrypointNumCPUs: float64(j.Spec.EntrypointNumCpus), EntrypointNumGPUs: float64(j.Spec.EntrypointNumGpus),
		EntrypointResources: res,
	}, nil
}

// HeadTarget is where the head of cluster is reached.
func HeadTarget(c *rayv1.RayCluster) ray.Target {
	return ray.Target{
		Namespace: c.Namespace, HeadServiceName: clusterbuild.HeadServiceName(c),
		DashboardPort: ray.DashboardPort(clusterbuild.HeadService(c)),
	}
}

// DashboardURL is status.dashboardURL as KubeRay writes it: <head-svc>.<ns>.svc.<domain>:<port>, no scheme.
func DashboardURL(c *rayv1.RayCluster, domain string) string {
	return clusterbuild.HeadServiceFQDN(c, domain) + ":" + strconv.Itoa(int(ray.DashboardPort(clusterbuild.HeadService(c))))
}
