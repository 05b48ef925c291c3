// Package metawrite writes objects and reads back only their metadata.
//
// The API server answers a write with the whole object it stored, and a client decodes all of it (for a Ray pod:
// its env, its scripts, a managedFields entry for every field sent), though the RayCluster controller reads nothing
// of either answer but the metadata: a pod's generated name, the cluster's new resourceVersion. Those decodes were
// the operator's largest allocations (docs/benchmarks.md, "Why each mechanism exists"). Asked for the
// `as=PartialObjectMetadata` media type (as the metadata client does for reads), the API server answers with the
// object's ObjectMeta alone, which it encodes and the client decodes at a fraction of the cost.
package metawrite

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// asMetadata is the media type parameter that asks for an object's metadata alone.
const asMetadata = ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

var (
	scheme = runtime.NewScheme()
	codecs serializer.CodecFactory
)

func init() {
	// core/v1 for the pods sent (and Status, which corev1 registers), ray.io/v1 for the RayClusters, meta.k8s.io/v1
	// for what comes back.
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, rayv1.AddToScheme, metav1.AddMetaToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	codecs = serializer.NewCodecFactory(scheme)
}

// newClient makes a REST client for one group version, sending contentType and asking for metadata in it. Each
// has a token bucket of its own at cfg's QPS and burst, as every resource's client the manager makes has
// (controller-runtime builds one REST client per kind), and shares hc's connections.
func newClient(cfg *rest.Config, hc *http.Client, apiPath string, gv schema.GroupVersion, contentType string) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = apiPath
	c.GroupVersion = &gv
	c.NegotiatedSerializer = codecs.WithoutConversion()
	c.ContentType = contentType
	c.AcceptContentTypes = contentType + asMetadata
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientForConfigAndClient(c, hc)
}

// metadataOf reads the API server's answer to a write: its error (the API server's Status, decoded: Raw would
// leave it unread), else the object's metadata.
func metadataOf(res rest.Result, what string) (*metav1.ObjectMeta, error) {
	if err := res.Error(); err != nil {
		return nil, err
	}
	raw, _ := res.Raw()
	obj, gvk, err := codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("decode the metadata of the %s: %w", what, err)
	}
	meta, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return nil, fmt.Errorf("the API server answered the %s with %v, not PartialObjectMetadata", what, gvk)
	}
	return &meta.ObjectMeta, nil
}

// Pods creates pods through its own REST client, in protobuf.
type Pods struct {
	rc rest.Interface
}

// NewPods makes a Pods from the operator's config and HTTP client (one connection pool with the manager's).
func NewPods(cfg *rest.Config, hc *http.Client) (*Pods, error) {
	rc, err := newClient(cfg, hc, "/api", corev1.SchemeGroupVersion, runtime.ContentTypeProtobuf)
	if err != nil {
		return nil, err
	}
	return &Pods{rc: rc}, nil
}

// Create creates pod in its namespace. On success pod's ObjectMeta is what the API server stored (the generated
// name, UID, resourceVersion, creation time, labels and annotations as admitted); its spec and status stay as
// sent: server-side defaults are not read back. A refused create returns the API server's error
// (apierrors.IsAlreadyExists, IsInvalid, IsForbidden... work on it).
func (p *Pods) Create(ctx context.Context, pod *corev1.Pod) error {
	meta, err := metadataOf(p.rc.Post().Namespace(pod.Namespace).Resource("pods").Body(pod).Do(ctx), "pod created")
	if err != nil {
		return err
	}
	pod.ObjectMeta = *meta
	return nil
}

// RayClusters writes RayCluster status through its own REST client, in JSON (a custom resource has no protobuf).
type RayClusters struct {
	rc rest.Interface
}

// NewRayClusters makes a RayClusters from the operator's config and HTTP client.
func NewRayClusters(cfg *rest.Config, hc *http.Client) (*RayClusters, error) {
	rc, err := newClient(cfg, hc, "/apis", rayv1.GroupVersion, runtime.ContentTypeJSON)
	if err != nil {
		return nil, err
	}
	return &RayClusters{rc: rc}, nil
}

// UpdateStatus replaces c's status (the status subresource, at c's resourceVersion: a stale one is a Conflict).
// On success c's resourceVersion is the API server's new one (a status write changes no other metadata); its spec
// and status stay as sent.
func (r *RayClusters) UpdateStatus(ctx context.Context, c *rayv1.RayCluster) error {
	// The encoder names the kind from the scheme (a cached object's TypeMeta is empty).
	res := r.rc.Put().Namespace(c.Namespace).Resource("rayclusters").Name(c.Name).SubResource("status").Body(c).Do(ctx)
	if err := res.Error(); err != nil {
		return err
	}
	// A status write changes nothing in the metadata but the resourceVersion (and managedFields, which the cache
	// drops): read that alone. The answer's managedFields list every field of the spec the cluster's creator set,
	// and decoding them into PartialObjectMetadata was still a large allocation per write.
	raw, _ := res.Raw()
	var answer struct {
		Kind     string `json:"kind"`
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return fmt.Errorf("decode the metadata of the RayCluster status written: %w", err)
	}
	if answer.Kind != "PartialObjectMetadata" || answer.Metadata.ResourceVersion == "" {
		return fmt.Errorf("the API server answered the RayCluster status written with kind %q, resourceVersion %q; want PartialObjectMetadata with a resourceVersion",
			answer.Kind, answer.Metadata.ResourceVersion)
	}
	c.ResourceVersion = answer.Metadata.ResourceVersion
	return nil
}
