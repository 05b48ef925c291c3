// Package podcreate creates pods and reads back only their metadata.
//
// The API server answers a create with the whole object it stored, and a client decodes all of it: for a Ray pod
// (its env, its scripts, a managedFields entry for every field sent) that decode was the operator's largest
// allocation site in a 500-cluster trial (21 % of all bytes allocated), though the RayCluster controller reads
// nothing of the answer but the generated name. Asked for the `as=PartialObjectMetadata` media type (as the
// metadata client does for reads), the API server answers with the pod's ObjectMeta alone, which it encodes and the
// client decodes at a fraction of the cost.
package podcreate

import (
	"context"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// accept asks for the created object's metadata, in protobuf.
const accept = runtime.ContentTypeProtobuf + ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

var (
	scheme = runtime.NewScheme()
	codecs serializer.CodecFactory
)

func init() {
	// core/v1 for the pods sent (and Status, which corev1 registers), meta.k8s.io/v1 for what comes back.
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, metav1.AddMetaToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	codecs = serializer.NewCodecFactory(scheme)
}

// Creator creates pods through its own REST client.
type Creator struct {
	rc rest.Interface
}

// New makes a Creator from the operator's config and HTTP client (one connection pool with the manager's). Its
// REST client has a token bucket of its own at cfg's QPS and burst, as every resource's client the manager makes
// has (controller-runtime builds one REST client per kind). It sends pods in protobuf.
func New(cfg *rest.Config, hc *http.Client) (*Creator, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = codecs.WithoutConversion()
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = accept
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientForConfigAndClient(c, hc)
	if err != nil {
		return nil, err
	}
	return &Creator{rc: rc}, nil
}

// Create creates pod in its namespace. On success pod's ObjectMeta is what the API server stored (the generated
// name, UID, resourceVersion, creation time, labels and annotations as admitted); its spec and status stay as
// sent: server-side defaults are not read back. A refused create returns the API server's error
// (apierrors.IsAlreadyExists, IsInvalid, IsForbidden... work on it).
func (c *Creator) Create(ctx context.Context, pod *corev1.Pod) error {
	res := c.rc.Post().Namespace(pod.Namespace).Resource("pods").Body(pod).Do(ctx)
	if err := res.Error(); err != nil {
		return err // the API server's Status, decoded (Raw would leave it unread)
	}
	raw, _ := res.Raw()
	obj, gvk, err := codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		return fmt.Errorf("decode the created pod's metadata: %w", err)
	}
	meta, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return fmt.Errorf("the API server answered a pod create with %v, not PartialObjectMetadata", gvk)
	}
	pod.ObjectMeta = meta.ObjectMeta
	return nil
}
