package configs

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/kube"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Shared copies, as in Flagger: releases whose Deployments read the same ConfigMap or Secret
// share its "<name>-primary" copy. Each release that reads the copy is one of its owners
// (Flagger keeps an owner reference per Canary); the copy goes with its last owner. Its
// contents change only while a single release reads it: changing them under another
// release's primary would make that primary run contents it never analysed.

// AnnotationOwners on a primary's copy of a tracked ConfigMap or Secret lists, comma
// separated, the releases (canary_release names of the namespace) whose primaries read it.
// The copy's release label names one of them, the first, as on every generated object.
const AnnotationOwners = "canary-release.dev/config-owners"

// copyOwners are the releases that own a copy: those the annotation lists and the one its
// release label names (a copy written before copies were shared has only the label).
func copyOwners(m metav1.Object) []string {
	var owners []string
	for _, o := range strings.Split(m.GetAnnotations()[AnnotationOwners], ",") {
		if o = strings.TrimSpace(o); o != "" {
			owners = append(owners, o)
		}
	}
	if o := m.GetLabels()[router.LabelRelease]; o != "" {
		owners = append(owners, o)
	}
	slices.Sort(owners)
	return slices.Compact(owners)
}

// setCopyOwners records owners (not empty) on a copy.
func setCopyOwners(m metav1.Object, owners []string) {
	owners = slices.Compact(slices.Sorted(slices.Values(owners)))
	labels, _ := router.MergeStrings(m.GetLabels(), map[string]string{router.LabelManagedBy: router.ManagedByValue, router.LabelRelease: owners[0]})
	annotations, _ := router.MergeStrings(m.GetAnnotations(), map[string]string{AnnotationOwners: strings.Join(owners, ",")})
	m.SetLabels(labels)
	m.SetAnnotations(annotations)
}

// isGeneratedCopy reports whether a "<name>-primary" object was written by a release; any
// other is the user's own, which no release takes over or deletes.
func isGeneratedCopy(m metav1.Object) bool {
	return m.GetLabels()[router.LabelManagedBy] == router.ManagedByValue && len(copyOwners(m)) > 0
}

// copyStore is the API of one kind of copy (ConfigMap or Secret) that sharing needs.
type copyStore[T metav1.Object] struct {
	kind   string
	api    kube.TypedAPI[T]
	delete func(ctx context.Context, name string, opts metav1.DeleteOptions) error
	// hash is the copy's data hash, as dataHash gives the original's.
	hash func(T) string
	// copyData sets live's data (and type) to want's.
	copyData func(live, want T)
}

func (c Copies) configMapCopies() copyStore[*corev1.ConfigMap] {
	api := c.Kube.CoreV1().ConfigMaps(c.Namespace)
	return copyStore[*corev1.ConfigMap]{
		kind: "ConfigMap", api: api, delete: api.Delete,
		hash: func(m *corev1.ConfigMap) string { return dataHash(m.Data, m.BinaryData) },
		copyData: func(live, want *corev1.ConfigMap) {
			live.Data, live.BinaryData = want.Data, want.BinaryData
		},
	}
}

func (c Copies) secretCopies() copyStore[*corev1.Secret] {
	api := c.Kube.CoreV1().Secrets(c.Namespace)
	return copyStore[*corev1.Secret]{
		kind: "Secret", api: api, delete: api.Delete,
		hash: func(s *corev1.Secret) string { return dataHash(s.StringData, s.Data) },
		copyData: func(live, want *corev1.Secret) {
			live.Data, live.StringData = want.Data, nil
		},
	}
}

// sharedContentsError is two releases that need different contents of one copy at once: the
// release then promotes into a copy of its own (EnsurePrimary).
type sharedContentsError struct {
	namespace, kind, copyName, original string
	release                             string
	others                              []string
	absent                              bool
}

func (e *sharedContentsError) Error() string {
	needs := "other contents of " + e.kind + " " + e.namespace + "/" + e.original
	if e.absent {
		needs = "no " + e.kind + " " + e.original + " (it no longer exists)"
	}
	return fmt.Sprintf("%s %s/%s is read by the primaries of canary_release %s too: canary_release %q needs %s", e.kind, e.namespace, e.copyName,
		strings.Join(e.others, ", "), e.release, needs)
}

// shareCopy makes want (named "<original>-primary", with data whose hash is wantHash) the copy
// this release's primary reads: it creates it, joins a copy with the same contents, or changes
// the contents of a copy that no other release reads.
func shareCopy[T metav1.Object](ctx context.Context, c Copies, s copyStore[T], original string, want T, wantHash string) error {
	self := c.Release
	return kube.Retry(ctx, func() error {
		live, err := s.api.Get(ctx, want.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			setCopyOwners(want, []string{self})
			_, err = s.api.Create(ctx, want, metav1.CreateOptions{FieldManager: c.FieldManager})
			if apierrors.IsAlreadyExists(err) {
				// Another release created it since: read it again and share it.
				return apierrors.NewConflict(corev1.Resource(strings.ToLower(s.kind)+"s"), want.GetName(), err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if !isGeneratedCopy(live) {
			return c.CheckOwned(live, s.kind)
		}
		owners := copyOwners(live)
		others := slices.DeleteFunc(slices.Clone(owners), func(o string) bool { return o == self })
		if s.hash(live) != wantHash {
			if len(others) > 0 {
				return &sharedContentsError{namespace: c.Namespace, kind: s.kind, copyName: want.GetName(), original: original, release: self, others: others}
			}
			s.copyData(live, want)
		} else if slices.Contains(owners, self) {
			return nil
		}
		setCopyOwners(live, append(others, self))
		_, err = s.api.Update(ctx, live, metav1.UpdateOptions{FieldManager: c.FieldManager})
		return err
	})
}

// dropCopy takes this release off a copy's owners: the copy is deleted when no other release
// reads it. With mustBeAlone, another owner is an error (the release needs the copy gone while
// another still reads it). A copy the release does not own is left alone.
func dropCopy[T metav1.Object](ctx context.Context, c Copies, s copyStore[T], original, name string, mustBeAlone bool) error {
	self := c.Release
	return kube.Retry(ctx, func() error {
		live, err := s.api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if !isGeneratedCopy(live) {
			return nil
		}
		owners := copyOwners(live)
		others := slices.DeleteFunc(slices.Clone(owners), func(o string) bool { return o == self })
		switch {
		case len(others) > 0 && mustBeAlone:
			return &sharedContentsError{namespace: c.Namespace, kind: s.kind, copyName: name, original: original, release: self, others: others, absent: true}
		case len(others) == len(owners):
			return nil // not ours
		case len(others) > 0:
			setCopyOwners(live, others)
			_, err = s.api.Update(ctx, live, metav1.UpdateOptions{FieldManager: c.FieldManager})
			return err
		}
		// The precondition refuses the delete (Conflict, then read again) if a release joined
		// since the read.
		rv := live.GetResourceVersion()
		err = s.delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}
