package vpmm_test

import (
	"bytes"
	"testing"

	"vpmm"
)

// The seed walkthrough, cases A-D (docs/design.md, traces/walkthrough_*.trace):
// +10 > +1 > -10 > +4 > +11 pages on one stream from 11 + X initial pages with
// one handle per page. 22 / 18 / 15 / 12 preallocated pages end with
// 22 / 18 / 16 / 16 mapped pages in the seed's layouts, the data of the
// surviving allocations intact.
func runCase(t *testing.T, initial uint64, stream vpmm.Stream) (string, uint64, vpmm.Stats) {
	t.Helper()
	c := hostConfig(64)
	c.InitialPages = initial
	c.MaxHandleSize = page
	p := newPool(t, c)
	a10, err := p.Malloc(10*page, stream)
	must(t, err)
	a1, err := p.Malloc(page, stream)
	must(t, err)
	copy(vpmm.HostBytes(a1, page), pattern(1, page))
	must(t, p.Free(a10, stream))
	a4, err := p.Malloc(4*page, stream)
	must(t, err)
	copy(vpmm.HostBytes(a4, 4*page), pattern(4, 4*page))
	a11, err := p.Malloc(11*page, stream)
	must(t, err)
	copy(vpmm.HostBytes(a11, 11*page), pattern(11, 11*page))
	must(t, p.Check())
	for _, b := range []struct {
		ptr  uintptr
		n    int
		seed byte
	}{{a1, page, 1}, {a4, 4 * page, 4}, {a11, 11 * page, 11}} {
		if !bytes.Equal(vpmm.HostBytes(b.ptr, b.n), pattern(b.seed, b.n)) {
			t.Errorf("data of the %d-page allocation changed", b.n/page)
		}
	}
	s := stats(t, p)
	lay := layout(t, p)
	for _, ptr := range []uintptr{a1, a4, a11} {
		must(t, p.Free(ptr, stream))
	}
	if live := stats(t, p).LiveBytes; live != 0 {
		t.Errorf("live bytes after freeing all: %d", live)
	}
	return lay, s.MappedBytes / page, s
}

func TestWalkthrough(t *testing.T) {
	cases := []struct {
		name           string
		initial        uint64
		layout         string
		mapped         uint64
		defrag, growth uint64
	}{
		{"A 22 pages: best fit", 22, "[4][-6][1][11][*42]", 22, 0, 0},
		{"B 18 pages: defragment", 18, "[*10][1][4][11][-2][*36]", 18, 1, 0},
		{"C 15 pages: defragment, grow 1", 15, "[*10][1][4][11][*38]", 16, 1, 1},
		{"D 12 pages: defragment leftover, grow", 12, "[4][*6][1][11][*42]", 16, 1, 1},
	}
	hs, err := vpmm.NewHostStream()
	must(t, err)
	defer hs.Close()
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			for _, stream := range []vpmm.Stream{vpmm.DefaultStream, hs.Stream()} {
				lay, mapped, s := runCase(t, c.initial, stream)
				if lay != c.layout || mapped != c.mapped {
					t.Errorf("stream %v: layout %s, %d mapped pages; want %s, %d", stream, lay, mapped, c.layout, c.mapped)
				}
				if s.NDefrag != c.defrag || s.NGrow != c.growth {
					t.Errorf("defrag %d grow %d; want %d %d", s.NDefrag, s.NGrow, c.defrag, c.growth)
				}
			}
		})
	}
}
