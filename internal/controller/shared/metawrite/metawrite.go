// Package metawrite writes objects and reads back only their metadata.
//
// The API server answers a write with the whole object it stored, and a client decodes all of it: for a Ray pod
// (its env, its scripts, a managedFields entry for every field sent) and for each status write of a custom
// resource (the whole object again) that decode is among the operator's largest allocation sites, though the
// controllers read nothing of either answer but the metadata (a pod's generated name, the object's new
// resourceVersion). Asked for the `as=PartialObjectMetadata` media type (as the metadata client does for reads),
// the API server answers with the object's ObjectMeta alone, which it encodes and the client decodes at a fraction
// of the cost.
package metawrite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	mantav1alpha1 "github.com/manta-dev/manta/api/manta/v1alpha1"
	rayv1 "github.com/manta-dev/manta/api/ray/v1"
)

// asMetadata is the media type parameter that asks for an object's metadata alone.
const asMetadata = ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

// scheme and codecs encode what is sent and decode what comes back.
var scheme, codecs = newScheme()

// newScheme holds core/v1 for the pods sent (and Status, which corev1 registers), events.k8s.io/v1 for the
// events, Manta's custom resources (ray.io/v1, manta.dev/v1alpha1) for the statuses, and meta.k8s.io/v1 for what
// comes back.
func newScheme() (*runtime.Scheme, serializer.CodecFactory) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, eventsv1.AddToScheme, rayv1.AddToScheme, mantav1alpha1.AddToScheme, metav1.AddMetaToScheme} {
		if err := add(s); err != nil {
			panic(err) // only a clash between these fixed groups' registrations, which no input changes
		}
	}
	return s, serializer.NewCodecFactory(s)
}

// decodeMetadata decodes an answer in any media type the API server speaks into the PartialObjectMetadata asked
// for.
func decodeMetadata(raw []byte) (*metav1.ObjectMeta, error) {
	obj, gvk, err := codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		return nil, err
	}
	meta, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return nil, fmt.Errorf("the API server answered with %v, not PartialObjectMetadata", gvk)
	}
	return &meta.ObjectMeta, nil
}

// Pods creates pods through its own REST client, in protobuf.
type Pods struct {
	ep *endpoint
}

// NewPods makes a Pods from the operator's config and HTTP client (one connection pool with the manager's).
func NewPods(cfg *rest.Config, hc *http.Client) (*Pods, error) {
	ep, err := newEndpoint(cfg, hc, "/api", corev1.SchemeGroupVersion, runtime.ContentTypeProtobuf)
	if err != nil {
		return nil, err
	}
	return &Pods{ep: ep}, nil
}

// Create creates pod in its namespace. On success pod's ObjectMeta is what the API server stored (the generated
// name, UID, resourceVersion, creation time, labels and annotations as admitted) but its managedFields, which the
// cache drops too; its spec and status stay as sent: server-side defaults are not read back. A refused create
// returns the API server's error (apierrors.IsAlreadyExists, IsInvalid, IsForbidden... work on it).
func (p *Pods) Create(ctx context.Context, pod *corev1.Pod) error {
	body, err := encodeProtobuf(pod, podKind)
	if err != nil {
		return err
	}
	w := write{verb: http.MethodPost, namespace: pod.Namespace, resource: "pods", contentType: runtime.ContentTypeProtobuf, body: body.bytes}
	err = p.ep.send(ctx, w, func(raw []byte) error {
		decode := decodeMetadata
		if bytes.HasPrefix(raw, protobufMagic) {
			decode = objectMetaOf // the answer asked for
		}
		meta, err := decode(raw)
		if err != nil {
			return fmt.Errorf("decode the metadata of the pod created: %w", err)
		}
		pod.ObjectMeta = *meta
		return nil
	})
	body.release()
	return err
}

// Events writes events.k8s.io/v1 Events through a REST client of its own, in protobuf, and reads nothing of the
// answers but their errors: the operator's event writer needs nothing of what the API server stored, and its
// clientset sent and read JSON (the clientsets' default), each Event encoded and its answer decoded whole.
type Events struct {
	ep *endpoint
}

// NewEvents makes an Events from a config (its QPS and burst are the writer's) and the operator's HTTP client.
func NewEvents(cfg *rest.Config, hc *http.Client) (*Events, error) {
	ep, err := newEndpoint(cfg, hc, "/apis", eventsv1.SchemeGroupVersion, runtime.ContentTypeProtobuf)
	if err != nil {
		return nil, err
	}
	return &Events{ep: ep}, nil
}

// Create creates ev in its namespace.
func (e *Events) Create(ctx context.Context, ev *eventsv1.Event) error {
	body, err := encodeProtobuf(ev, eventKind)
	if err != nil {
		return err
	}
	defer body.release()
	return e.ep.send(ctx, write{verb: http.MethodPost, namespace: ev.Namespace, resource: "events", contentType: runtime.ContentTypeProtobuf, body: body.bytes}, nil)
}

// MergePatch applies a JSON merge patch to the Event namespace/name.
func (e *Events) MergePatch(ctx context.Context, namespace, name string, patch []byte) error {
	return e.ep.send(ctx, write{verb: http.MethodPatch, namespace: namespace, resource: "events", name: name, contentType: string(types.MergePatchType), body: patch}, nil)
}

// GetRateLimiter is the writes' token bucket.
func (e *Events) GetRateLimiter() flowcontrol.RateLimiter { return e.ep.limiter }

// statusResources are the custom resources whose status a Status writes, by kind, with their resource.
var statusResources = map[schema.GroupVersionKind]string{
	rayv1.GroupVersion.WithKind("RayCluster"):           "rayclusters",
	rayv1.GroupVersion.WithKind("RayJob"):               "rayjobs",
	rayv1.GroupVersion.WithKind("RayService"):           "rayservices",
	rayv1.GroupVersion.WithKind("RayCronJob"):           "raycronjobs",
	mantav1alpha1.GroupVersion.WithKind("ImagePullJob"): "imagepulljobs",
}

// Status writes the status of Manta's custom resources (statusResources) through REST clients of its own, in JSON
// (a custom resource has no protobuf): it is a reconcile.StatusWriter.
type Status struct {
	kinds map[schema.GroupVersionKind]statusClient
}

type statusClient struct {
	ep       *endpoint
	resource string
}

// NewStatus makes a Status from the operator's config and HTTP client, with one REST client per kind (and so one
// token bucket per kind, as the manager's client has).
func NewStatus(cfg *rest.Config, hc *http.Client) (*Status, error) {
	s := &Status{kinds: make(map[schema.GroupVersionKind]statusClient, len(statusResources))}
	for gvk, resource := range statusResources {
		ep, err := newEndpoint(cfg, hc, "/apis", gvk.GroupVersion(), runtime.ContentTypeJSON)
		if err != nil {
			return nil, fmt.Errorf("%s status client: %w", gvk.Kind, err)
		}
		s.kinds[gvk] = statusClient{ep: ep, resource: resource}
	}
	return s, nil
}

// kindClient is the REST client of obj's kind; refused names what is refused to a kind without one.
func (s *Status) kindClient(obj client.Object, refused string) (schema.GroupVersionKind, statusClient, error) {
	// The kind comes from the scheme (a cached object's TypeMeta is empty), as the encoder's does.
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return gvk, statusClient{}, err
	}
	c, ok := s.kinds[gvk]
	if !ok {
		return gvk, statusClient{}, fmt.Errorf("metawrite %s of %v", refused, gvk)
	}
	return gvk, c, nil
}

// UpdateStatus replaces obj's status (the status subresource, at obj's resourceVersion: a stale one is a
// Conflict). On success obj's resourceVersion is the API server's new one (a status write changes no other
// metadata); its spec and status stay as sent. obj is one of statusResources' kinds.
func (s *Status) UpdateStatus(ctx context.Context, obj client.Object) error {
	gvk, c, err := s.kindClient(obj, "writes no status")
	if err != nil {
		return err
	}
	body, err := statusBody(obj, gvk)
	if err != nil {
		return err
	}
	w := write{verb: http.MethodPut, namespace: obj.GetNamespace(), resource: c.resource, name: obj.GetName(), subresource: "status",
		contentType: runtime.ContentTypeJSON, body: body}
	var rv string
	err = c.ep.send(ctx, w, func(raw []byte) error {
		// A status write changes nothing in the metadata but the resourceVersion (and managedFields, which the
		// cache drops): read that alone. Decoding the answer into PartialObjectMetadata would allocate for its
		// managedFields, which list every spec field the object's creator set.
		var answer struct {
			Kind     string `json:"kind"`
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &answer); err != nil {
			return fmt.Errorf("decode the metadata of the %s status written: %w", gvk.Kind, err)
		}
		if answer.Kind != "PartialObjectMetadata" || answer.Metadata.ResourceVersion == "" {
			return fmt.Errorf("the API server answered the %s status written with kind %q, resourceVersion %q; want PartialObjectMetadata with a resourceVersion",
				gvk.Kind, answer.Kind, answer.Metadata.ResourceVersion)
		}
		rv = answer.Metadata.ResourceVersion // a copy: json.Unmarshal's strings do not alias raw
		return nil
	})
	if err != nil {
		return err
	}
	obj.SetResourceVersion(rv)
	return nil
}

// PreservesSpec makes Status a reconcile.SpecPreserving writer: UpdateStatus and PatchMetadata set nothing of obj
// but its resourceVersion and finalizers.
func (s *Status) PreservesSpec() {}

// PatchMetadata sends patch, a JSON merge patch of obj's metadata alone (a controller's finalizer, guarded by the
// resourceVersion), to obj itself and reads back the metadata alone: the answer is otherwise the whole object (a
// RayJob's spec holds a whole RayClusterSpec), which the API server encodes and the client decodes for a controller
// that reads nothing of it but the new resourceVersion. On success obj's resourceVersion and finalizers are the API
// server's; nothing else of obj changes. obj is one of statusResources' kinds.
func (s *Status) PatchMetadata(ctx context.Context, obj client.Object, patch []byte) error {
	gvk, c, err := s.kindClient(obj, "patches no metadata")
	if err != nil {
		return err
	}
	w := write{verb: http.MethodPatch, namespace: obj.GetNamespace(), resource: c.resource, name: obj.GetName(),
		contentType: string(types.MergePatchType), body: patch}
	var answer struct {
		Kind     string `json:"kind"`
		Metadata struct {
			ResourceVersion string   `json:"resourceVersion"`
			Finalizers      []string `json:"finalizers"`
		} `json:"metadata"`
	}
	err = c.ep.send(ctx, w, func(raw []byte) error {
		if err := json.Unmarshal(raw, &answer); err != nil {
			return fmt.Errorf("decode the metadata of the %s patched: %w", gvk.Kind, err)
		}
		if answer.Kind != "PartialObjectMetadata" || answer.Metadata.ResourceVersion == "" {
			return fmt.Errorf("the API server answered the %s patched with kind %q, resourceVersion %q; want PartialObjectMetadata with a resourceVersion",
				gvk.Kind, answer.Kind, answer.Metadata.ResourceVersion)
		}
		return nil
	})
	if err != nil {
		return err
	}
	obj.SetResourceVersion(answer.Metadata.ResourceVersion)
	obj.SetFinalizers(answer.Metadata.Finalizers)
	return nil
}

// statusBody is what a status write sends: obj's kind, the metadata that names it and states the version written
// (name, namespace, resourceVersion, uid), and its status. The API server takes nothing but the status from a
// status write (it keeps the stored spec and metadata, and the spec's field managers), so the spec, a RayJob's
// and a RayCluster's pod templates included, is neither encoded here nor decoded there.
func statusBody(obj client.Object, gvk schema.GroupVersionKind) ([]byte, error) {
	var status any
	switch o := obj.(type) {
	case *rayv1.RayCluster:
		status = &o.Status
	case *rayv1.RayJob:
		status = &o.Status
	case *rayv1.RayService:
		status = &o.Status
	case *rayv1.RayCronJob:
		status = &o.Status
	case *mantav1alpha1.ImagePullJob:
		status = &o.Status
	default:
		return nil, fmt.Errorf("metawrite writes no status of %T", obj)
	}
	type meta struct {
		Name            string    `json:"name"`
		Namespace       string    `json:"namespace,omitempty"`
		UID             types.UID `json:"uid,omitempty"`
		ResourceVersion string    `json:"resourceVersion,omitempty"`
	}
	return json.Marshal(struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   meta   `json:"metadata"`
		Status     any    `json:"status"`
	}{gvk.GroupVersion().String(), gvk.Kind, meta{obj.GetName(), obj.GetNamespace(), obj.GetUID(), obj.GetResourceVersion()}, status})
}

// createResources are the kinds a Creates writes, by kind: their resource and whether the API server reads and
// answers them in protobuf (the built-in kinds) or only in JSON (a custom resource).
var createResources = map[schema.GroupVersionKind]struct {
	resource string
	protobuf bool
}{
	corev1.SchemeGroupVersion.WithKind("Service"): {"services", true},
	rayv1.GroupVersion.WithKind("RayCluster"):     {"rayclusters", false},
}

// Creates creates the objects of createResources' kinds and reads back only their metadata: for a RayCluster a
// RayJob creates, the answer is otherwise the whole cluster (its spec, the pod templates in it), which the API
// server encodes and the client decodes for a controller that reads nothing of it but the name.
type Creates struct {
	kinds map[schema.GroupVersionKind]*endpoint
}

// NewCreates makes a Creates from the operator's config and HTTP client, one REST client (and token bucket) per
// kind, as the manager's client has.
func NewCreates(cfg *rest.Config, hc *http.Client) (*Creates, error) {
	c := &Creates{kinds: make(map[schema.GroupVersionKind]*endpoint, len(createResources))}
	for gvk, r := range createResources {
		apiPath, contentType := "/apis", runtime.ContentTypeJSON
		if gvk.Group == "" {
			apiPath = "/api"
		}
		if r.protobuf {
			contentType = runtime.ContentTypeProtobuf
		}
		ep, err := newEndpoint(cfg, hc, apiPath, gvk.GroupVersion(), contentType)
		if err != nil {
			return nil, fmt.Errorf("%s create client: %w", gvk.Kind, err)
		}
		c.kinds[gvk] = ep
	}
	return c, nil
}

// Handles says whether obj is of a kind Create writes.
func (c *Creates) Handles(obj client.Object) bool {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return false
	}
	_, ok := c.kinds[gvk]
	return ok
}

// Create creates obj in its namespace. On success obj's ObjectMeta is what the API server stored (the generated
// name, UID, resourceVersion, creation time, labels and annotations as admitted) but its managedFields; the rest
// stays as sent: server-side defaults (a Service's cluster IP, a custom resource's schema defaults) are not read
// back. A refused create returns the API server's error (apierrors.IsAlreadyExists, IsInvalid... work on it).
func (c *Creates) Create(ctx context.Context, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return err
	}
	ep, ok := c.kinds[gvk]
	if !ok {
		return fmt.Errorf("metawrite creates no %v", gvk)
	}
	r := createResources[gvk]
	w := write{verb: http.MethodPost, namespace: obj.GetNamespace(), resource: r.resource}
	var release func()
	if r.protobuf {
		body, err := encodeProtobuf(obj, gvk)
		if err != nil {
			return err
		}
		w.contentType, w.body, release = runtime.ContentTypeProtobuf, body.bytes, body.release
	} else {
		if w.body, err = runtime.Encode(jsonEncoder(gvk.GroupVersion()), obj); err != nil {
			return err
		}
		w.contentType = runtime.ContentTypeJSON
	}
	err = ep.send(ctx, w, func(raw []byte) error {
		decode := decodeMetadata
		if bytes.HasPrefix(raw, protobufMagic) {
			decode = objectMetaOf
		}
		meta, err := decode(raw)
		if err != nil {
			return fmt.Errorf("decode the metadata of the %s created: %w", gvk.Kind, err)
		}
		meta.ManagedFields = nil
		return setObjectMeta(obj, meta)
	})
	if release != nil {
		release()
	}
	return err
}

// Delete deletes obj with opts and reads nothing of the answer, which it asks for as metadata alone: a deleted
// object is answered with the whole object (a RayCluster's pod templates and managedFields), which the manager's
// client decodes, encodes and decodes again into a map for a caller that reads none of it. A refused delete
// returns the API server's error (apierrors.IsNotFound, IsConflict for a failed precondition... work on it). obj
// is of one of createResources' kinds.
func (c *Creates) Delete(ctx context.Context, obj client.Object, opts *metav1.DeleteOptions) error {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if err != nil {
		return err
	}
	ep, ok := c.kinds[gvk]
	if !ok {
		return fmt.Errorf("metawrite deletes no %v", gvk)
	}
	body, err := json.Marshal(opts)
	if err != nil {
		return err
	}
	return ep.send(ctx, write{verb: http.MethodDelete, namespace: obj.GetNamespace(), resource: createResources[gvk].resource,
		name: obj.GetName(), contentType: runtime.ContentTypeJSON, body: body}, nil)
}

// setObjectMeta replaces obj's ObjectMeta with meta; obj is of one of createResources' kinds.
func setObjectMeta(obj client.Object, meta *metav1.ObjectMeta) error {
	switch o := obj.(type) {
	case *corev1.Service:
		o.ObjectMeta = *meta
	case *rayv1.RayCluster:
		o.ObjectMeta = *meta
	default:
		return fmt.Errorf("metawrite sets no metadata of %T", obj)
	}
	return nil
}

// jsonEncoder encodes an object of gv in JSON with its apiVersion and kind, as a REST client's Body(obj) does.
func jsonEncoder(gv schema.GroupVersion) runtime.Encoder {
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	return codecs.WithoutConversion().EncoderForVersion(info.Serializer, gv)
}
