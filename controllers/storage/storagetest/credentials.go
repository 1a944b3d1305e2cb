package storagetest

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Secret creates a Secret in the world's namespace whose data is exactly data (an empty string is
// a key with an empty value, as `kubectl create secret --from-literal=AWS_ACCESS_KEY_ID=` makes).
func (w *World) Secret(name string, data map[string]string) {
	w.T.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: w.NS, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	w.Must(K8s.Create(Ctx, s))
	got := &corev1.Secret{}
	w.Must(K8s.Get(Ctx, client.ObjectKeyFromObject(s), got))
	for k := range data {
		if _, ok := got.Data[k]; !ok {
			w.T.Fatalf("Secret %s lost key %q: the story would prove nothing", name, k)
		}
	}
}

// EditSecret sets the keys of set and removes the keys of remove in the Secret name of the
// world's namespace, as `kubectl apply` of an edited Secret does (a password rotation).
func (w *World) EditSecret(name string, set map[string]string, remove ...string) {
	w.T.Helper()
	s := &corev1.Secret{}
	w.Must(K8s.Get(Ctx, client.ObjectKey{Namespace: w.NS, Name: name}, s))
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range set {
		s.Data[k] = []byte(v)
	}
	for _, k := range remove {
		delete(s.Data, k)
	}
	w.Must(K8s.Update(Ctx, s))
}
