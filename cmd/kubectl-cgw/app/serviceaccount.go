package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// What join creates on a managed cluster is labelled, so a later join only
// ever replaces its own binding.
const (
	managedByLabel = "app.kubernetes.io/managed-by"
	managedByValue = "kubectl-cgw"
)

// clusterTimeout bounds each request to the managed cluster, so an
// unreachable cluster fails join instead of hanging it.
const clusterTimeout = 30 * time.Second

type serviceAccountOptions struct {
	name, namespace, clusterRole string
	duration                     time.Duration
}

// bindingName is the ClusterRoleBinding join makes for the ServiceAccount.
func (o *serviceAccountOptions) bindingName() string {
	return "cluster-gateway:" + o.namespace + ":" + o.name
}

// undoStack holds how to take back each change join made on the cluster.
type undoStack struct {
	steps []undoStep
}

type undoStep struct {
	do  func(context.Context) error
	cmd string // the same by hand, if doing it fails
}

func (u *undoStack) push(cmd string, do func(context.Context) error) {
	u.steps = append(u.steps, undoStep{do: do, cmd: cmd})
}

// run undoes everything, newest first, and returns the commands for what it
// could not undo. It uses its own context: the caller's may be what ended the run.
func (u *undoStack) run() []string {
	var left []string
	for i := len(u.steps) - 1; i >= 0; i-- {
		ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
		err := u.steps[i].do(ctx)
		cancel()
		if err != nil && !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("%s   # %v", u.steps[i].cmd, err))
		}
	}
	u.steps = nil
	return left
}

// errorAfterUndo adds to err whether what join changed on the cluster is gone again.
func (u *undoStack) errorAfterUndo(err error) error {
	changed := len(u.steps) > 0
	if left := u.run(); len(left) > 0 {
		return fmt.Errorf("%w\nand taking back what join changed on the cluster failed; do it by hand:\n  %s", err, strings.Join(left, "\n  "))
	} else if changed {
		return fmt.Errorf("%w\n(what join changed on the cluster has been taken back)", err)
	}
	return err
}

// serviceAccountSetup is one run of --service-account against one cluster.
type serviceAccountSetup struct {
	*serviceAccountOptions
	src     *source
	cs      kubernetes.Interface
	kubectl string // how to reach the cluster by hand, for messages
	log     func(format string, args ...any)
	undo    undoStack
}

// setup makes the ServiceAccount and its binding on the cluster (reusing
// them if they exist) and requests a token. On error it has taken back its
// own changes; on success the caller owns s.undo.
func (o *serviceAccountOptions) setup(ctx context.Context, src *source, log func(string, ...any)) (*serviceAccountSetup, string, error) {
	cfg := rest.CopyConfig(src.config)
	if cfg.Timeout == 0 {
		cfg.Timeout = clusterTimeout
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	s := &serviceAccountSetup{
		serviceAccountOptions: o, src: src, cs: cs, log: log,
		kubectl: fmt.Sprintf("kubectl --kubeconfig %s --context %s", src.file, src.context),
	}
	token, err := s.run(ctx)
	if err != nil {
		return nil, "", s.undo.errorAfterUndo(err)
	}
	return s, token, nil
}

func (s *serviceAccountSetup) run(ctx context.Context) (string, error) {
	if _, err := s.cs.RbacV1().ClusterRoles().Get(ctx, s.clusterRole, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("there is no ClusterRole %q on the cluster (`%s get clusterroles` lists them); choose another --cluster-role", s.clusterRole, s.kubectl)
		}
		return "", s.fail(fmt.Sprintf("read ClusterRole %q", s.clusterRole), err)
	}

	sas := s.cs.CoreV1().ServiceAccounts(s.namespace)
	if sa, err := sas.Get(ctx, s.name, metav1.GetOptions{}); err == nil && sa.Labels[managedByLabel] != managedByValue {
		// Its token would carry whatever it is bound to, not just the role chosen here.
		return "", fmt.Errorf("the cluster has a ServiceAccount %s/%s that join did not make (no %s=%s label): its token would carry whatever that account is bound to; choose another --service-account-name", s.namespace, s.name, managedByLabel, managedByValue)
	} else if apierrors.IsNotFound(err) {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace, Labels: map[string]string{managedByLabel: managedByValue}}}
		if _, err := sas.Create(ctx, sa, metav1.CreateOptions{FieldManager: managedByValue}); err != nil {
			return "", s.fail(fmt.Sprintf("create ServiceAccount %s/%s", s.namespace, s.name), err)
		}
		s.undo.push(fmt.Sprintf("%s -n %s delete serviceaccount %s", s.kubectl, s.namespace, s.name), func(ctx context.Context) error {
			return sas.Delete(ctx, s.name, metav1.DeleteOptions{})
		})
		s.log("serviceaccount %s/%s created on the cluster", s.namespace, s.name)
	} else if err != nil {
		return "", s.fail(fmt.Sprintf("read ServiceAccount %s/%s", s.namespace, s.name), err)
	}

	if err := s.bind(ctx); err != nil {
		return "", err
	}

	seconds := int64(s.duration / time.Second)
	tr, err := sas.CreateToken(ctx, s.name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", s.fail(fmt.Sprintf("request a token for ServiceAccount %s/%s", s.namespace, s.name), err)
	}
	if tr.Status.Token == "" {
		return "", fmt.Errorf("the cluster answered the TokenRequest for %s/%s without a token", s.namespace, s.name)
	}
	s.log("token of serviceaccount %s/%s expires %s: re-run join before then to rotate it",
		s.namespace, s.name, tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339))
	return tr.Status.Token, nil
}

// bind makes ClusterRoleBinding bindingName() bind the ServiceAccount to
// clusterRole. A binding an earlier join made to another role is replaced
// (roleRef is immutable); anyone else's binding of that name is left alone.
func (s *serviceAccountSetup) bind(ctx context.Context) error {
	crbs := s.cs.RbacV1().ClusterRoleBindings()
	name := s.bindingName()
	want := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{managedByLabel: managedByValue}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: s.clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: s.name, Namespace: s.namespace}},
	}
	old, err := crbs.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		old = nil
	case err != nil:
		return s.fail(fmt.Sprintf("read ClusterRoleBinding %s", name), err)
	case old.RoleRef == want.RoleRef && slices.Equal(old.Subjects, want.Subjects):
		return nil
	case old.Labels[managedByLabel] != managedByValue:
		return fmt.Errorf("the cluster has a ClusterRoleBinding %s that join did not make; delete it or choose another --service-account-name", name)
	default:
		if err := crbs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return s.fail(fmt.Sprintf("replace ClusterRoleBinding %s (its role changes)", name), err)
		}
		restore := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: old.Labels}, RoleRef: old.RoleRef, Subjects: old.Subjects}
		s.undo.push(fmt.Sprintf("%s create clusterrolebinding %s --clusterrole=%s --serviceaccount=%s:%s", s.kubectl, name, old.RoleRef.Name, s.namespace, s.name),
			func(ctx context.Context) error {
				_, err := crbs.Create(ctx, restore, metav1.CreateOptions{FieldManager: managedByValue})
				return err
			})
	}
	if _, err := crbs.Create(ctx, want, metav1.CreateOptions{FieldManager: managedByValue}); err != nil {
		return s.fail(fmt.Sprintf("bind ServiceAccount %s/%s to ClusterRole %s (ClusterRoleBinding %s)", s.namespace, s.name, s.clusterRole, name), err)
	}
	s.undo.push(fmt.Sprintf("%s delete clusterrolebinding %s", s.kubectl, name), func(ctx context.Context) error {
		return crbs.Delete(ctx, name, metav1.DeleteOptions{})
	})
	if old == nil {
		s.log("clusterrolebinding %s created on the cluster: ClusterRole %s", name, s.clusterRole)
	} else {
		s.log("clusterrolebinding %s changed on the cluster: ClusterRole %s, was %s", name, s.clusterRole, old.RoleRef.Name)
	}
	return nil
}

// fail says which cluster refused or could not be reached, and what to check.
func (s *serviceAccountSetup) fail(what string, err error) error {
	return clusterError(s.src, what, err)
}

func clusterError(src *source, what string, err error) error {
	where := fmt.Sprintf("the cluster at %s (context %q of %s)", src.config.Host, src.context, src.file)
	var netErr net.Error
	var urlErr *url.Error
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s refused to %s: %v\n(with --service-account, the kubeconfig's user must be able to create ServiceAccounts, their tokens and ClusterRoleBindings there)", where, what, err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s did not accept the kubeconfig's credentials to %s: %v", where, what, err)
	case utilnet.IsConnectionRefused(err), errors.As(err, &netErr), errors.As(err, &urlErr):
		return fmt.Errorf("cannot reach %s to %s: %v\n(check the kubeconfig's server address and that this machine can reach it)", where, what, err)
	}
	return fmt.Errorf("%s: could not %s: %v", where, what, err)
}
