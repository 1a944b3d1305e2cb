package v1alpha1

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	"github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

// filler fills objects with random content the JSON wire format can carry: quantities are
// canonical, times have second precision.
func filler(f *randfill.Filler) *randfill.Filler {
	return f.NilChance(0.3).NumElements(0, 3).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			*q = *resource.NewQuantity(c.Int63n(1<<40), resource.BinarySI)
		},
		func(t *metav1.Time, c randfill.Continue) {
			*t = metav1.NewTime(time.Unix(c.Int63n(1<<33), 0).UTC())
		},
		// An empty mode is Standalone (the CRD defaults it); conversion writes the default out.
		func(m *v1beta1.Mode, c randfill.Continue) {
			*m = []v1beta1.Mode{v1beta1.ModeStandalone, v1beta1.ModeReplication, v1beta1.Mode(c.String(8) + "x")}[c.Intn(3)]
		},
		func(m *metav1.ObjectMeta, c randfill.Continue) {
			c.FillNoCustom(m)
			m.ManagedFields = nil // covered by apimachinery's own tests; the webhook never touches it
			m.CreationTimestamp = metav1.NewTime(time.Unix(c.Int63n(1<<33), 0).UTC())
			m.DeletionTimestamp = nil
		},
	)
}

// wire sends obj through JSON into out, as the API server and the webhook do.
func wire(t testing.TB, obj, out any) {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
}

// roundTrip checks hub -> v1alpha1 -> JSON -> hub and v1alpha1 -> hub -> JSON -> v1alpha1 for the
// objects f fills, and returns how many of the hubs used the annotation.
func roundTrip(t testing.TB, f *randfill.Filler) {
	t.Helper()
	hub := &v1beta1.RedisCache{}
	f.Fill(hub)
	hub.TypeMeta = metav1.TypeMeta{}
	spoke := &RedisCache{}
	if err := spoke.ConvertFrom(hub.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	var wired RedisCache
	wire(t, spoke, &wired)
	back := &v1beta1.RedisCache{}
	if err := wired.ConvertTo(back); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(hub, back) {
		a, _ := json.Marshal(hub)
		b, _ := json.Marshal(back)
		t.Fatalf("v1beta1 -> v1alpha1 -> v1beta1 lost data:\n in: %s\nout: %s", a, b)
	}

	alpha := &RedisCache{}
	f.Fill(alpha)
	alpha.TypeMeta = metav1.TypeMeta{}
	delete(alpha.Annotations, HubOnlyAnnotation)
	viaHub := &v1beta1.RedisCache{}
	if err := alpha.DeepCopy().ConvertTo(viaHub); err != nil {
		t.Fatal(err)
	}
	var wiredHub v1beta1.RedisCache
	wire(t, viaHub, &wiredHub)
	alphaBack := &RedisCache{}
	if err := alphaBack.ConvertFrom(&wiredHub); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(alpha, alphaBack) {
		a, _ := json.Marshal(alpha)
		b, _ := json.Marshal(alphaBack)
		t.Fatalf("v1alpha1 -> v1beta1 -> v1alpha1 lost data:\n in: %s\nout: %s", a, b)
	}
}

func TestConversionRoundTripIsLossless(t *testing.T) {
	f := filler(randfill.NewWithSeed(1))
	for range 2000 {
		roundTrip(t, f)
	}
}

// FuzzConversionRoundTrip runs the same checks on inputs chosen by `go test -fuzz`.
func FuzzConversionRoundTrip(f *testing.F) {
	f.Add([]byte("seed"))
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, filler(randfill.NewFromGoFuzz(data)))
	})
}

// TestConversionMapsFields pins the field mapping with one readable example each way, so a
// mapping mistake that happens to round-trip (e.g. two fields swapped both ways) still fails.
func TestConversionMapsFields(t *testing.T) {
	max := resource.MustParse("100Mi")
	alpha := &RedisCache{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Annotations: map[string]string{HubOnlyAnnotation: `{"maxClients":64}`}},
		Spec: RedisCacheSpec{
			Replicas: ptr.To[int32](2), Image: "redis:7", ImagePullPolicy: "Never", Port: 6380,
			Eviction:            &Eviction{Policy: EvictionVolatileTTL, MaxMemory: &max},
			Auth:                &Auth{SecretRef: SecretKeyReference{Name: "s", Key: "k"}},
			PodDisruptionBudget: &PodDisruptionBudget{Enabled: ptr.To(false), MaxUnavailable: ptr.To[int32](2)},
			NodeSelector:        map[string]string{"disk": "ssd"},
		},
		Status: RedisCacheStatus{ObservedGeneration: 3, Phase: PhaseReady, ReadyReplicas: 2, ConfigHash: "h"},
	}
	hub := &v1beta1.RedisCache{}
	if err := alpha.ConvertTo(hub); err != nil {
		t.Fatal(err)
	}
	want := v1beta1.RedisCacheSpec{
		Mode:     v1beta1.ModeStandalone, // no mode in the annotation: the default
		Replicas: ptr.To[int32](2),
		Redis: v1beta1.Redis{
			Image: "redis:7", ImagePullPolicy: "Never", Port: 6380,
			Memory:     &v1beta1.Memory{MaxMemory: &max, EvictionPolicy: v1beta1.EvictionVolatileTTL},
			MaxClients: ptr.To[int32](64),
			Auth:       &v1beta1.Auth{SecretRef: v1beta1.SecretKeyReference{Name: "s", Key: "k"}},
		},
		PodDisruptionBudget: &v1beta1.PodDisruptionBudget{Enabled: ptr.To(false), MaxUnavailable: ptr.To[int32](2)},
		NodeSelector:        map[string]string{"disk": "ssd"},
	}
	if !equality.Semantic.DeepEqual(hub.Spec, want) {
		t.Fatalf("v1alpha1 -> v1beta1 spec:\n got %+v\nwant %+v", hub.Spec, want)
	}
	if _, ok := hub.Annotations[HubOnlyAnnotation]; ok {
		t.Fatalf("the v1beta1 object still carries %s", HubOnlyAnnotation)
	}
	if hub.Status.ObservedGeneration != 3 || hub.Status.Phase != v1beta1.PhaseReady || hub.Status.ConfigHash != "h" {
		t.Fatalf("status not carried over: %+v", hub.Status)
	}

	hub.Spec.Redis.MaxClients = nil
	plain := &RedisCache{}
	if err := plain.ConvertFrom(hub); err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.Annotations[HubOnlyAnnotation]; ok {
		t.Fatalf("annotation %s written although v1beta1 had nothing v1alpha1 lacks", HubOnlyAnnotation)
	}
	if plain.Spec.Eviction.Policy != EvictionVolatileTTL || plain.Spec.Port != 6380 || plain.Spec.Auth.SecretRef.Key != "k" {
		t.Fatalf("v1beta1 -> v1alpha1 spec: %+v", plain.Spec)
	}

	// Replication mode and its settings travel in the annotation; so does the replication status.
	hub.Spec.Mode = v1beta1.ModeReplication
	hub.Spec.Replication = &v1beta1.Replication{FailoverAfterSeconds: ptr.To[int32](7)}
	hub.Status.Replication = &v1beta1.ReplicationStatus{Primary: "c-1",
		Replicas: []v1beta1.ReplicaStatus{{Pod: "c-0", InSync: false, LagBytes: ptr.To[int64](5)}}}
	repl := &RedisCache{}
	if err := repl.ConvertFrom(hub); err != nil {
		t.Fatal(err)
	}
	if got := repl.Annotations[HubOnlyAnnotation]; got != `{"mode":"Replication","replication":{"failoverAfterSeconds":7}}` {
		t.Fatalf("annotation %s = %s", HubOnlyAnnotation, got)
	}
	if r := repl.Status.Replication; r == nil || r.Primary != "c-1" || len(r.Replicas) != 1 || *r.Replicas[0].LagBytes != 5 {
		t.Fatalf("replication status not carried over: %+v", repl.Status.Replication)
	}
}

func TestConvertToRejectsBrokenAnnotation(t *testing.T) {
	alpha := &RedisCache{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{HubOnlyAnnotation: "{"}}}
	if err := alpha.ConvertTo(&v1beta1.RedisCache{}); err == nil {
		t.Fatal("a malformed annotation converted without error")
	}
}
