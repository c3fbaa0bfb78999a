package localenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Names of the objects every managed cluster gets.
const (
	FakeNodeName = "fake-node"
	DemoPod      = "demo" // container "main"
	SlowPod      = "slow" // container "slow": non-follow logs hang, to test request timeouts
	BulkPod      = "bulk" // container "bulk": `logs -f` writes lines as fast as the client reads them (hack/bench)
)

// setupManaged starts c's fake kubelet and creates, as c's admin, the Node
// that points at it, the default ServiceAccount (no controller-manager makes
// it, and admission refuses Pods without it) and Running pods on that node.
func (e *Env) setupManaged(ctx context.Context, c *Cluster) error {
	k, err := startFakeKubelet(c.Name, c.kubeletCert)
	if err != nil {
		return fmt.Errorf("%s fake kubelet: %w", c.Name, err)
	}
	c.Kubelet = k
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	return retry(ctx, c.Name+" objects", func(ctx context.Context) error {
		if err := ensureNode(ctx, cs, k.Port); err != nil {
			return err
		}
		if err := ensure(ctx, cs.CoreV1().ServiceAccounts("default").Create, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}); err != nil {
			return fmt.Errorf("default ServiceAccount: %w", err)
		}
		for pod, container := range map[string]string{DemoPod: "main", SlowPod: "slow", BulkPod: "bulk"} {
			if err := ensureRunningPod(ctx, cs, pod, container); err != nil {
				return err
			}
		}
		return nil
	})
}

func ensureNode(ctx context.Context, cs kubernetes.Interface, kubeletPort int) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: FakeNodeName}}
	if err := ensure(ctx, cs.CoreV1().Nodes().Create, node); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, FakeNodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	// No declaredFeatures: kube-apiserver then speaks SPDY to the kubelet, all cri-streaming serves.
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: FakeNodeName}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(kubeletPort)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "FakeKubelet", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

func ensureRunningPod(ctx context.Context, cs kubernetes.Interface, name, container string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   FakeNodeName,
			Containers: []corev1.Container{{Name: container, Image: "fake"}},
		},
	}
	if err := ensure(ctx, cs.CoreV1().Pods("default").Create, pod); err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	pod, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	// kubectl port-forward refuses a Pending pod.
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: container, Image: "fake", ImageID: "fake", Ready: true, Started: ptr(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
	_, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

func ptr[T any](v T) *T { return &v }

// ensure creates obj unless it exists.
func ensure[T any](ctx context.Context, create func(context.Context, T, metav1.CreateOptions) (T, error), obj T) error {
	_, err := create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// retry calls f until it succeeds, for at most 30s: a just-ready
// kube-apiserver may still be creating the default namespace or RBAC roles,
// but a real error should surface without waiting for the whole start timeout.
func retry(ctx context.Context, what string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (gave up: %v)", what, err, ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}
