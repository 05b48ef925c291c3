package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxRayCronJobNameLength is KubeRay's limit on RayCronJob names: the child RayJob is named
// <name>-<minutes since the epoch> and a RayJob name may have at most 47 characters.
const MaxRayCronJobNameLength = 36

// RayCronJobSpec says when to create a RayJob and what it runs.
type RayCronJobSpec struct {
	// JobTemplate is the spec of every RayJob the schedule creates.
	// +kubebuilder:validation:XValidation:rule="has(self.rayClusterSpec) || (has(self.clusterSelector) && size(self.clusterSelector) > 0)",message="jobTemplate.rayClusterSpec or jobTemplate.clusterSelector must be set"
	JobTemplate RayJobSpec `json:"jobTemplate"`
	// Schedule is a standard five-field cron expression ("minute hour day-of-month month day-of-week"), or one of
	// the descriptors @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly and "@every <duration>".
	// The time zone goes in timeZone, never in the schedule.
	// +kubebuilder:validation:XValidation:rule="!self.contains('TZ')",message="schedule must not set a time zone (TZ= or CRON_TZ=): use spec.timeZone"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('@') ? (self.matches('^@(yearly|annually|monthly|weekly|daily|midnight|hourly)$') || self.startsWith('@every ')) : self.matches('^[[:space:]]*[^[:space:]]+([[:space:]]+[^[:space:]]+){4}[[:space:]]*$')",message="schedule must have five fields (minute hour day-of-month month day-of-week) or be a descriptor such as @daily or @every 1h"
	Schedule string `json:"schedule"`
	// TimeZone is the IANA time zone the schedule is read in (for example Europe/Paris); unset means the
	// operator's local time zone. Zones come from the time zone database built into the operator.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$`
	TimeZone *string `json:"timeZone,omitempty"`
	// Suspend stops new runs; RayJobs already created are left alone. Runs whose time passes while suspended are
	// created when the schedule resumes.
	// +optional
	Suspend *bool `json:"suspend,omitempty"`
}

// RayCronJobConditionType is a condition type in RayCronJobStatus.Conditions.
type RayCronJobConditionType string

// InvalidRayCronJobSpec is true while the spec cannot be scheduled; its message names the fields.
const InvalidRayCronJobSpec RayCronJobConditionType = "InvalidRayCronJobSpec"

// RayCronJobStatus is what the controller observed and did.
type RayCronJobStatus struct {
	// LastScheduleTime is the scheduled time of the latest run a RayJob was created for.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// Conditions of the RayCronJob (Manta only): InvalidRayCronJobSpec.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ObservedGeneration is the generation this status describes (Manta only).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// RayCronJob creates a RayJob from its template at each time of its cron schedule.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=all
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="schedule",type=string,JSONPath=".spec.schedule",priority=0
// +kubebuilder:printcolumn:name="timezone",type=string,JSONPath=".spec.timeZone",priority=0
// +kubebuilder:printcolumn:name="last schedule",type=date,JSONPath=".status.lastScheduleTime",priority=0
// +kubebuilder:printcolumn:name="age",type="date",JSONPath=".metadata.creationTimestamp",priority=0
// +kubebuilder:printcolumn:name="suspend",type=boolean,JSONPath=".spec.suspend",priority=0
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 36",message="metadata.name must be no more than 36 characters: the RayJobs it creates are named <name>-<minutes since the epoch>"
// +kubebuilder:validation:XValidation:rule="has(self.spec)",message="spec is required"
// +genclient
type RayCronJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec RayCronJobSpec `json:"spec,omitempty"`
	// +optional
	Status RayCronJobStatus `json:"status,omitempty"`
}

// RayCronJobList is a list of RayCronJobs.
// +kubebuilder:object:root=true
type RayCronJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RayCronJob `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RayCronJob{}, &RayCronJobList{})
}
