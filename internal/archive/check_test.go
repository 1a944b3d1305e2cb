package archive

import (
	"bytes"
	"context"
	"testing"
)

func TestCheckReportsWhatReadReportsWithoutWriting(t *testing.T) {
	src, _ := buildTree(t, false)
	var buf bytes.Buffer
	ws, err := Write(context.Background(), src, &buf, WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := Check(context.Background(), bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Read(context.Background(), bytes.NewReader(buf.Bytes()), t.TempDir(), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs != rs {
		t.Errorf("Check and Read disagree:\ncheck %+v\nread  %+v", cs, rs)
	}
	if err := NewManifest("id", "ns", "pvc", "k", ws).Verify(cs); err != nil {
		t.Errorf("a good archive does not verify: %v", err)
	}

	flipped := bytes.Clone(buf.Bytes())
	flipped[len(flipped)/3] ^= 0x08
	bad, err := Check(context.Background(), bytes.NewReader(flipped))
	if err == nil {
		err = NewManifest("id", "ns", "pvc", "k", ws).Verify(bad)
	}
	if err == nil {
		t.Error("Check let a flipped byte through")
	}
}
