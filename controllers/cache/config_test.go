package cache

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	cachev1beta1 "github.com/okgoes/okgoes-operator/api/cache/v1beta1"
)

func TestRenderRedisConf(t *testing.T) {
	mem := resource.MustParse("64Mi")
	tests := []struct {
		name    string
		spec    cachev1beta1.RedisCacheSpec
		want    []string
		notWant []string
	}{
		{
			name:    "no eviction leaves Redis unbounded",
			spec:    cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{Port: 6379}},
			want:    []string{"port 6379\n", `save ""`, "appendonly no"},
			notWant: []string{"maxmemory", "maxclients"},
		},
		{
			name: "maxMemory in bytes with the chosen policy",
			spec: cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{Port: 7000, Memory: &cachev1beta1.Memory{
				EvictionPolicy: cachev1beta1.EvictionVolatileTTL, MaxMemory: &mem,
			}}},
			want: []string{"port 7000\n", "maxmemory 67108864\n", "maxmemory-policy volatile-ttl\n"},
		},
		{
			name: "maxClients only when set (v1beta1)",
			spec: cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{Port: 6379, MaxClients: new(int32(128))}},
			want: []string{"maxclients 128\n"},
		},
		{
			name: "empty policy means the API default allkeys-lru",
			spec: cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{Port: 6379, Memory: &cachev1beta1.Memory{}}},
			want: []string{"maxmemory-policy allkeys-lru\n"},
		},
		{
			name: "auth never reaches the configuration",
			spec: cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{Port: 6379, Auth: &cachev1beta1.Auth{
				SecretRef: cachev1beta1.SecretKeyReference{Name: "redis-pass", Key: "pw"},
			}}},
			notWant: []string{"requirepass", "redis-pass"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := renderRedisConf(tt.spec)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("rendered config lacks %q:\n%s", w, got)
				}
			}
			for _, nw := range tt.notWant {
				if strings.Contains(got, nw) {
					t.Errorf("rendered config contains %q:\n%s", nw, got)
				}
			}
		})
	}
}

func TestConfigHashFollowsConfigOnly(t *testing.T) {
	base := cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{Port: 6379, Memory: &cachev1beta1.Memory{EvictionPolicy: cachev1beta1.EvictionAllKeysLFU}}}
	scaled := *base.DeepCopy()
	scaled.Replicas = new(int32(5))
	scaled.Redis.Image = "example.org/redis:8"
	changed := *base.DeepCopy()
	changed.Redis.Memory.EvictionPolicy = cachev1beta1.EvictionNoEviction

	h := configHash(renderRedisConf(base))
	if got := configHash(renderRedisConf(scaled)); got != h {
		t.Errorf("replicas/image changed the config hash: %s != %s", got, h)
	}
	if got := configHash(renderRedisConf(changed)); got == h {
		t.Errorf("a policy change kept the config hash %s", h)
	}
}

func TestPullPolicy(t *testing.T) {
	tests := []struct {
		image string
		asked string
		want  string
	}{
		{"redis", "", "Always"},
		{"redis:latest", "", "Always"},
		{"docker.io/library/redis:7.4-alpine", "", "IfNotPresent"},
		{"localhost:5000/redis", "", "Always"},
		{"localhost:5000/redis:7", "", "IfNotPresent"},
		{"redis@sha256:abc", "", "IfNotPresent"},
		{"redis:7", "Never", "Never"},
	}
	for _, tt := range tests {
		if got := pullPolicy(tt.image, corev1PullPolicy(tt.asked)); string(got) != tt.want {
			t.Errorf("pullPolicy(%q, %q) = %q, want %q", tt.image, tt.asked, got, tt.want)
		}
	}
}

func TestValidateSpec(t *testing.T) {
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	limits := func(mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)}}
	}
	tests := []struct {
		name    string
		spec    cachev1beta1.RedisCacheSpec
		wantErr bool
	}{
		{"no eviction", cachev1beta1.RedisCacheSpec{Resources: limits("1Gi")}, false},
		{"no memory limit", cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{Memory: &cachev1beta1.Memory{MaxMemory: q("8Gi")}}}, false},
		{"equal to the limit", cachev1beta1.RedisCacheSpec{Resources: limits("1Gi"), Redis: cachev1beta1.Redis{Memory: &cachev1beta1.Memory{MaxMemory: q("1024Mi")}}}, false},
		{"above the limit", cachev1beta1.RedisCacheSpec{Resources: limits("1Gi"), Redis: cachev1beta1.Redis{Memory: &cachev1beta1.Memory{MaxMemory: q("1025Mi")}}}, true},
		{"persistence twice maxMemory", cachev1beta1.RedisCacheSpec{Persistence: &cachev1beta1.Persistence{Size: *q("2Gi")},
			Redis: cachev1beta1.Redis{Memory: &cachev1beta1.Memory{MaxMemory: q("1Gi")}}}, false},
		{"persistence below twice maxMemory", cachev1beta1.RedisCacheSpec{Persistence: &cachev1beta1.Persistence{Size: *q("2047Mi")},
			Redis: cachev1beta1.Redis{Memory: &cachev1beta1.Memory{MaxMemory: q("1Gi")}}}, true},
		{"persistence without maxMemory", cachev1beta1.RedisCacheSpec{Persistence: &cachev1beta1.Persistence{Size: *q("1Mi")}}, false},
		{"default image", cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{Image: cachev1beta1.DefaultImage}}, false},
		{"image with registry port and digest", cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{
			Image: "localhost:5000/cache/redis:7@sha256:" + strings.Repeat("ab", 32)}}, false},
		{"image with an upper-case repository", cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{Image: "Redis:7"}}, true},
		{"image with an empty tag", cachev1beta1.RedisCacheSpec{Redis: cachev1beta1.Redis{Image: "redis:"}}, true},
	}
	for _, tt := range tests {
		if err := validateSpec(tt.spec); (err != nil) != tt.wantErr {
			t.Errorf("%s: validateSpec = %v, wantErr %v", tt.name, err, tt.wantErr)
		}
	}
}
