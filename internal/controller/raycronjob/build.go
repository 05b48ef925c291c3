package raycronjob

import (
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// ChildName is the RayJob of the run scheduled at run: <cronjob>-<minutes since the epoch>, KubeRay's scheme. It
// is the same on every attempt, so a repeated create for a run is refused by the API server instead of running the
// job twice.
func ChildName(cronJob string, run time.Time) string {
	return cronJob + "-" + strconv.FormatInt(run.Unix()/60, 10)
}

// buildRayJob is the RayJob for the run scheduled at run: the template's spec, KubeRay's label and annotation, and
// the RayCronJob as its controller so it is deleted with it.
func buildRayJob(cj *rayv1.RayCronJob, run time.Time) *rayv1.RayJob {
	return &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{
			Name:            ChildName(cj.Name, run),
			Namespace:       cj.Namespace,
			Labels:          map[string]string{LabelCronJobName: cj.Name},
			Annotations:     map[string]string{AnnotationScheduledTimestamp: run.UTC().Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cj, rayv1.GroupVersion.WithKind("RayCronJob"))},
		},
		Spec: *cj.Spec.JobTemplate.DeepCopy(),
	}
}
