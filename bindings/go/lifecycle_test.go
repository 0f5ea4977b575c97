package vpmm_test

import (
	"errors"
	"testing"

	"vpmm"
)

func TestCloseReleasesMemoryAndIsIdempotent(t *testing.T) {
	c := hostConfig(64)
	c.HostCapacity = 8 * page
	for i := 0; i < 4; i++ {
		// Each pool may take the whole host capacity: only works when Close
		// of the previous one gave it back, live allocations included.
		p, err := vpmm.NewPool(&c)
		must(t, err)
		_, err = p.Malloc(8*page, vpmm.DefaultStream)
		must(t, err)
		must(t, p.Close())
		must(t, p.Close())
		if _, err := p.Malloc(page, vpmm.DefaultStream); !errors.Is(err, vpmm.ErrClosed) {
			t.Fatalf("Malloc after Close: %v", err)
		}
		if err := p.SetOOMCallback(nil); !errors.Is(err, vpmm.ErrClosed) {
			t.Fatalf("SetOOMCallback after Close: %v", err)
		}
		if _, err := p.Stats(); !errors.Is(err, vpmm.ErrClosed) {
			t.Fatalf("Stats after Close: %v", err)
		}
	}
}

func TestReservationsCharge(t *testing.T) {
	p := newPool(t, hostConfig(256))
	r, err := p.Reserve(8*page, vpmm.ReserveTry)
	must(t, err)
	ptr, err := p.MallocWith(2*page, vpmm.DefaultStream, vpmm.AllocAttrs{Reservation: r})
	must(t, err)
	size, used, err := r.Info()
	must(t, err)
	if size != 8*page || used != 2*page || stats(t, p).ReservedBytes != 8*page {
		t.Fatalf("reservation %d/%d", size, used)
	}
	must(t, p.Free(ptr, vpmm.DefaultStream))
	must(t, r.Release())
	if s := stats(t, p); s.ReservedBytes != 0 {
		t.Fatalf("reserved after release: %d", s.ReservedBytes)
	}
	// UpTo takes what is available.
	c := hostConfig(256)
	c.MemoryLimit = 4 * page
	q := newPool(t, c)
	r2, err := q.Reserve(100*page, vpmm.ReserveUpTo)
	must(t, err)
	if size, _, _ := r2.Info(); size != 4*page {
		t.Fatalf("up-to reservation of %d bytes", size)
	}
	must(t, r2.Release())
}

func TestPoolStreamsAndConfig(t *testing.T) {
	p := newPool(t, hostConfig(256))
	if p.BackendName() != "host" {
		t.Fatal(p.BackendName())
	}
	cfg, err := p.Config()
	must(t, err)
	if cfg.PageSize != page || cfg.Backend != vpmm.BackendHost {
		t.Fatalf("config %+v", cfg)
	}
	s, err := p.NewStream()
	must(t, err)
	ptr, err := p.Malloc(page, s)
	must(t, err)
	regions, err := p.Regions()
	must(t, err)
	found := false
	for _, r := range regions {
		if r.VA == ptr {
			found = r.Kind == vpmm.RegionLive && r.Stream == s
		}
	}
	if !found {
		t.Fatalf("live region on the pool's stream not found in %+v", regions)
	}
	must(t, p.Free(ptr, s))
	must(t, p.Synchronize(s))
	must(t, p.DestroyStream(s))
	if vpmm.Version() == "" || vpmm.ABIVersion() != 1 {
		t.Fatalf("version %q abi %d", vpmm.Version(), vpmm.ABIVersion())
	}
}

func TestMarkStepReportsTheStepsDriverTime(t *testing.T) {
	p := newPool(t, hostConfig(256))
	must(t, p.MarkStep())                            // opens the first step
	ptr, err := p.Malloc(4*page, vpmm.DefaultStream) // grows: driver calls in the step
	must(t, err)
	must(t, p.Free(ptr, vpmm.DefaultStream))
	must(t, p.MarkStep())
	s, err := p.Stats()
	must(t, err)
	if s.NSteps != 1 || s.LastStepDriverNs == 0 || s.LastStepNs < s.LastStepDriverNs {
		t.Fatalf("after one step: steps %d, step %d ns, driver %d ns", s.NSteps, s.LastStepNs, s.LastStepDriverNs)
	}
	if s.StepsDriverNs != s.LastStepDriverNs || s.StepsNs != s.LastStepNs {
		t.Fatalf("sums %d / %d ns after one step of %d / %d", s.StepsNs, s.StepsDriverNs, s.LastStepNs, s.LastStepDriverNs)
	}
}
