package clusterbuild

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
	"github.com/manta-dev/manta/internal/version"
)

// stored is desired as the API server returns it: defaults filled, an allocated IP and node ports, and what users
// and other controllers added.
func stored(desired *corev1.Service) *corev1.Service {
	s := desired.DeepCopy()
	s.ResourceVersion = "7"
	if s.Spec.Type == "" {
		s.Spec.Type = corev1.ServiceTypeClusterIP
	}
	if s.Spec.ClusterIP == "" {
		s.Spec.ClusterIP = "10.96.0.10"
	}
	for i := range s.Spec.Ports {
		p := &s.Spec.Ports[i]
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
		if s.Spec.Type == corev1.ServiceTypeNodePort {
			p.NodePort = 30000 + int32(i)
		}
	}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels["user"] = "keep"
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations["metallb/ip"] = "keep"
	return s
}

func TestUpdateService(t *testing.T) {
	tests := []struct {
		name string
		// before builds the existing Service from the cluster; change edits the spec afterwards.
		before            func(*rayv1.RayCluster)
		change            func(*rayv1.RayCluster)
		changed, recreate bool
		check             func(t *testing.T, got *corev1.Service)
	}{{
		name:   "nothing changed: no write",
		change: func(*rayv1.RayCluster) {},
	}, {
		name: "a new container port reaches the Service",
		change: func(c *rayv1.RayCluster) {
			c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "dashboard", ContainerPort: 8266}}
		},
		changed: true,
		check: func(t *testing.T, got *corev1.Service) {
			var names []string
			for _, p := range got.Spec.Ports {
				names = append(names, p.Name)
				if p.Name == "dashboard" && (p.Port != 8266 || p.TargetPort.IntValue() != 8266) {
					t.Errorf("dashboard port %+v", p)
				}
			}
			if diff := cmp.Diff([]string{"dashboard", "metrics"}, names); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
		},
	}, {
		name: "headServiceAnnotations are applied, others' annotations and labels kept",
		change: func(c *rayv1.RayCluster) {
			c.Spec.HeadServiceAnnotations = map[string]string{"prometheus.io/scrape": "true"}
		},
		changed: true,
		check: func(t *testing.T, got *corev1.Service) {
			if got.Annotations["prometheus.io/scrape"] != "true" || got.Annotations["metallb/ip"] != "keep" || got.Labels["user"] != "keep" {
				t.Errorf("labels %v annotations %v", got.Labels, got.Annotations)
			}
			if got.Spec.ClusterIP != corev1.ClusterIPNone || got.ResourceVersion != "7" {
				t.Errorf("allocated fields changed: %+v", got)
			}
		},
	}, {
		name:    "NodePort to LoadBalancer keeps the allocated node ports",
		before:  func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.ServiceType = corev1.ServiceTypeNodePort },
		change:  func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.ServiceType = corev1.ServiceTypeLoadBalancer },
		changed: true,
		check: func(t *testing.T, got *corev1.Service) {
			if got.Spec.Type != corev1.ServiceTypeLoadBalancer || got.Spec.ClusterIP != "10.96.0.10" {
				t.Errorf("spec %+v", got.Spec)
			}
			for i, p := range got.Spec.Ports {
				if p.NodePort != 30000+int32(i) {
					t.Errorf("port %s lost its node port: %+v", p.Name, p)
				}
			}
		},
	}, {
		name:     "headless to NodePort must be recreated",
		change:   func(c *rayv1.RayCluster) { c.Spec.HeadGroupSpec.ServiceType = corev1.ServiceTypeNodePort },
		changed:  true,
		recreate: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster()
			if tc.before != nil {
				tc.before(c)
			}
			existing := stored(HeadService(c))
			orig := existing.DeepCopy()
			tc.change(c)
			got, changed, recreate := UpdateService(existing, HeadService(c))
			if changed != tc.changed || recreate != tc.recreate {
				t.Fatalf("changed %v recreate %v, want %v %v", changed, recreate, tc.changed, tc.recreate)
			}
			if diff := cmp.Diff(orig, existing); diff != "" {
				t.Errorf("existing Service mutated:\n%s", diff)
			}
			if !changed {
				if got != existing {
					t.Error("an unchanged Service was copied: the existing one is the cache's, read on every reconcile")
				}
				if diff := cmp.Diff(existing, got); diff != "" {
					t.Errorf("unchanged Service rewritten:\n%s", diff)
				}
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}
}

// The serve Service follows the Ray container's serve ports.
func TestUpdateServeService(t *testing.T) {
	c := cluster()
	existing := stored(ServeService(c))
	c.Spec.HeadGroupSpec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "serve", ContainerPort: 9000}}
	got, changed, recreate := UpdateService(existing, ServeService(c))
	if !changed || recreate || len(got.Spec.Ports) != 1 || got.Spec.Ports[0].Port != 9000 {
		t.Errorf("changed %v recreate %v ports %+v", changed, recreate, got.Spec.Ports)
	}
}

func TestPortsEqual(t *testing.T) {
	h2c, h2c2, grpc := "kubernetes.io/h2c", "kubernetes.io/h2c", "grpc"
	p := corev1.ServicePort{Name: "serve", Protocol: corev1.ProtocolTCP, Port: 8000, TargetPort: intstr.FromInt32(8000)}
	withApp := func(a *string) corev1.ServicePort { q := p; q.AppProtocol = a; return q }
	for _, tc := range []struct {
		a, b []corev1.ServicePort
		want bool
	}{
		{nil, []corev1.ServicePort{}, true},
		{[]corev1.ServicePort{p}, []corev1.ServicePort{p}, true},
		{[]corev1.ServicePort{withApp(&h2c)}, []corev1.ServicePort{withApp(&h2c2)}, true}, // by value, not pointer
		{[]corev1.ServicePort{withApp(&h2c)}, []corev1.ServicePort{withApp(&grpc)}, false},
		{[]corev1.ServicePort{withApp(&h2c)}, []corev1.ServicePort{p}, false},
		{[]corev1.ServicePort{p}, nil, false},
		{[]corev1.ServicePort{p}, []corev1.ServicePort{{Name: "serve", Protocol: corev1.ProtocolTCP, Port: 8000, TargetPort: intstr.FromString("serve")}}, false},
		{[]corev1.ServicePort{p}, []corev1.ServicePort{{Name: "serve", Protocol: corev1.ProtocolTCP, Port: 8000, TargetPort: intstr.FromInt32(8000), NodePort: 30000}}, false},
	} {
		if got := portsEqual(tc.a, tc.b); got != tc.want {
			t.Errorf("portsEqual(%+v, %+v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// The stamp says which operator created a Service: a Service KubeRay or an older Manta created is not written for
// it, and an update for a spec change leaves it as it was.
func TestUpdateServiceKeepsTheStamp(t *testing.T) {
	asRelease(t, "v1.0.0")
	c := cluster()
	kuberay := stored(HeadService(c))
	delete(kuberay.Annotations, AnnotationVersion)
	delete(kuberay.Annotations, AnnotationCommit)
	older := stored(HeadService(c))
	older.Annotations[AnnotationVersion] = "v0.9.0"

	version.Version = "v1.1.0"
	for name, existing := range map[string]*corev1.Service{"KubeRay's": kuberay, "v0.9.0's": older} {
		if _, changed, recreate := UpdateService(existing, HeadService(c)); changed || recreate {
			t.Errorf("%s head Service, same spec: changed=%v recreate=%v, want no write", name, changed, recreate)
		}
		c2 := cluster()
		c2.Spec.HeadServiceAnnotations = map[string]string{"team": "a"}
		got, changed, _ := UpdateService(existing, HeadService(c2))
		if !changed || got.Annotations["team"] != "a" {
			t.Fatalf("%s head Service: the user's annotation did not reach it (changed=%v): %v", name, changed, got.Annotations)
		}
		if got.Annotations[AnnotationVersion] != existing.Annotations[AnnotationVersion] || got.Annotations[AnnotationCommit] != existing.Annotations[AnnotationCommit] {
			t.Errorf("%s head Service: the update rewrote the stamp: %v", name, got.Annotations)
		}
	}
}
