package clustergateway

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/clustergateway/cluster-gateway/pkg/apis/gateway/v1alpha1"
)

// Gateway is a ClusterGateway as read from its Secret, parsed once per
// resourceVersion so requests do no parsing of their own.
type Gateway struct {
	// Object holds the gateway including its credential material: never return it.
	Object *v1alpha1.ClusterGateway
	// Ready is false when the stored data cannot be used; Problem says why.
	Ready   bool
	Problem string
	// Address and ProxyURL are parsed when Ready.
	Address  *url.URL
	ProxyURL *url.URL
	// expires is when the client certificate expires (zero: none): the parse
	// is redone then, so Ready turns False without a write.
	expires time.Time
}

// Cache serves gateways from an informer over the labelled Secrets of one
// namespace: no request reads the hub.
type Cache struct {
	namespace string
	client    kubernetes.Interface
	informer  cache.SharedIndexInformer
	lister    corelisters.SecretLister

	mu     sync.Mutex
	parsed map[string]*Gateway // by name, valid for Object.ResourceVersion
}

// NewCache builds the informer; Run starts it.
func NewCache(client kubernetes.Interface, namespace string) *Cache {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelGateway + "=true" }))
	inf := factory.Core().V1().Secrets()
	c := &Cache{
		namespace: namespace,
		client:    client,
		informer:  inf.Informer(),
		lister:    inf.Lister(),
		parsed:    map[string]*Gateway{},
	}
	// Of the hub's field ownership of the Secrets only the time of the last
	// write is used (status's lastTransitionTime): keep just that, to save memory.
	_ = c.informer.SetTransform(func(obj interface{}) (interface{}, error) {
		if s, ok := obj.(*corev1.Secret); ok && len(s.ManagedFields) > 0 {
			t := lastWrite(s)
			s.ManagedFields = []metav1.ManagedFieldsEntry{{Time: &t}}
		}
		return obj, nil
	})
	return c
}

// Run runs the informer until ctx is done.
func (c *Cache) Run(ctx context.Context) { c.informer.RunWithContext(ctx) }

// HasSynced reports whether the first list has been read.
func (c *Cache) HasSynced() bool { return c.informer.HasSynced() }

// Namespace is where the Secrets live.
func (c *Cache) Namespace() string { return c.namespace }

// OnDelete calls fn with the name of every gateway whose Secret is deleted.
func (c *Cache) OnDelete(fn func(name string)) error {
	_, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if s, ok := obj.(*corev1.Secret); ok {
				c.mu.Lock()
				delete(c.parsed, s.Name)
				c.mu.Unlock()
				fn(s.Name)
			}
		},
	})
	return err
}

// Get returns the named gateway, or a NotFound error.
func (c *Cache) Get(name string) (*Gateway, error) {
	s, err := c.lister.Secrets(c.namespace).Get(name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, apierrors.NewNotFound(v1alpha1.Resource("clustergateways"), name)
		}
		return nil, err
	}
	return c.gateway(s), nil
}

// List returns the gateways whose labels match, and the resourceVersion the
// cache had reached before it was read (a watch from it may repeat, never miss).
func (c *Cache) List(selector labels.Selector) ([]*Gateway, string, error) {
	rv := c.informer.LastSyncResourceVersion()
	secrets, err := c.lister.Secrets(c.namespace).List(labels.Everything())
	if err != nil {
		return nil, "", err
	}
	out := make([]*Gateway, 0, len(secrets))
	for _, s := range secrets {
		g := c.gateway(s)
		// The gateway's labels are in its Secret's data, so selectors are
		// served here, from the parsed gateways.
		if selector != nil && !selector.Matches(labels.Set(g.Object.Labels)) {
			continue
		}
		out = append(out, g)
	}
	return out, rv, nil
}

// secret returns the cached Secret of a gateway.
func (c *Cache) secret(name string) (*corev1.Secret, error) {
	return c.lister.Secrets(c.namespace).Get(name)
}

func (c *Cache) gateway(s *corev1.Secret) *Gateway {
	c.mu.Lock()
	g, ok := c.parsed[s.Name]
	c.mu.Unlock()
	if ok && g.Object.ResourceVersion == s.ResourceVersion && g.Object.UID == s.UID &&
		(g.expires.IsZero() || !g.Ready || time.Now().Before(g.expires)) {
		return g
	}
	g = parseGateway(s)
	c.mu.Lock()
	c.parsed[s.Name] = g
	c.mu.Unlock()
	return g
}

func parseGateway(s *corev1.Secret) *Gateway {
	obj := fromSecret(s)
	g := &Gateway{Object: obj}
	if c := obj.Status.Credential; c != nil && c.NotAfter != nil {
		g.expires = c.NotAfter.Time
	}
	for _, cond := range obj.Status.Conditions {
		if cond.Type == v1alpha1.ConditionReady {
			g.Ready = cond.Status == metav1.ConditionTrue
			if !g.Ready {
				g.Problem = cond.Message
			}
		}
	}
	if g.Ready {
		var err error
		if g.Address, err = v1alpha1.ParseAddress(obj.Spec.Endpoint.Address); err != nil {
			g.Ready, g.Problem = false, fmt.Sprintf("spec.endpoint.address %v", err)
		}
		if obj.Spec.Endpoint.ProxyURL != "" {
			if g.ProxyURL, err = v1alpha1.ParseProxyURL(obj.Spec.Endpoint.ProxyURL); err != nil {
				g.Ready, g.Problem = false, fmt.Sprintf("spec.endpoint.proxyURL %v", err)
			}
		}
	}
	return g
}
