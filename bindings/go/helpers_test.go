package vpmm_test

import (
	"fmt"
	"strings"
	"testing"

	"vpmm"
)

const page = 64 << 10

// hostConfig is a host-backend pool of 64 KiB pages, independent of VPMM_*.
func hostConfig(vaPages uint64) vpmm.Config {
	c := vpmm.DefaultConfig()
	c.Backend = vpmm.BackendHost
	c.PageSize = page
	c.VASize = vaPages * page
	c.HostCapacity = 64 << 20
	return c
}

func newPool(t *testing.T, c vpmm.Config) *vpmm.Pool {
	t.Helper()
	p, err := vpmm.NewPool(&c)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func stats(t *testing.T, p *vpmm.Pool) vpmm.Stats {
	t.Helper()
	s, err := p.Stats()
	must(t, err)
	return s
}

// layout is the pool in the seed notation, sizes in pages: "[4][*6][1][11][*42]".
func layout(t *testing.T, p *vpmm.Pool) string {
	t.Helper()
	regions, err := p.Regions()
	must(t, err)
	var b strings.Builder
	for _, r := range regions {
		fmt.Fprintf(&b, "[%s%d]", r.Kind.Mark(), r.Size/page)
	}
	return b.String()
}

// pattern differs per byte and per seed.
func pattern(seed byte, n int) []byte {
	x := uint32(0x9e3779b9) ^ uint32(seed)*0x01000193
	out := make([]byte, n)
	for i := range out {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		out[i] = byte(x)
	}
	return out
}
