package kopiarepo

import (
	"context"
	"testing"
)

// BenchmarkOpen is the fixed cost of a mover run before it reads a file: opening an existing
// repository on a real MinIO (the format blob, the key derivation, the indexes) with an empty
// cache, as a mover Job starts, and closing it, for each key derivation a new repository can
// have (spec.kopia.keyDerivation). docs/benchmarks.md, "Why the mover's defaults are what they are".
//
//	go test ./internal/kopiarepo -run '^$' -bench Open -benchmem -count 5
func BenchmarkOpen(b *testing.B) {
	for _, kd := range []string{KeyDerivationScrypt, KeyDerivationPBKDF2} {
		b.Run(kd, func(b *testing.B) {
			bk := newBucket(b)
			cfg := bk.config("volumes/" + kd)
			ctx := context.Background()
			r, err := Open(ctx, cfg, testPassword, Options{CacheDir: b.TempDir(), KeyDerivation: kd})
			if err != nil {
				b.Fatal(err)
			}
			if err := r.Close(ctx); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				r, err := Open(ctx, cfg, testPassword, Options{CacheDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Close(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
