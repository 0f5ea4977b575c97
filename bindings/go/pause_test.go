package vpmm_test

import (
	"bytes"
	"errors"
	"testing"

	"vpmm"
)

func TestPauseResumeWithBackupKeepsEveryByte(t *testing.T) {
	p := newPool(t, hostConfig(256))
	size := 3*page + 1234
	kv, err := p.MallocTagged(uint64(size), vpmm.DefaultStream, "kv", true)
	must(t, err)
	other, err := p.MallocTagged(2*page, vpmm.DefaultStream, "kv", true)
	must(t, err)
	keep, err := p.Malloc(page, vpmm.DefaultStream) // untagged: never paused
	must(t, err)
	copy(vpmm.HostBytes(kv, size), pattern(7, size))
	copy(vpmm.HostBytes(other, 2*page), pattern(8, 2*page))
	mapped := stats(t, p).MappedBytes

	n, err := p.PauseCount("kv")
	must(t, err)
	if n != 2 {
		t.Fatalf("paused %d regions, want 2", n)
	}
	s := stats(t, p)
	if s.PausedBytes != 6*page || s.MappedBytes != mapped-6*page || s.BackupBytes < uint64(size)+2*page {
		t.Fatalf("after pause: paused %d mapped %d backup %d", s.PausedBytes, s.MappedBytes, s.BackupBytes)
	}
	ts, err := p.TagStats("kv")
	must(t, err)
	if ts.NLive != 0 || ts.NPaused != 2 {
		t.Fatalf("tag stats %+v", ts)
	}
	if again, err := p.Pause("kv"); err != nil || again {
		t.Fatalf("second pause: %v %v, want false nil", again, err)
	}
	if did, err := p.Resume("kv"); err != nil || !did {
		t.Fatalf("resume: %v %v", did, err)
	}
	if again, err := p.Resume("kv"); err != nil || again {
		t.Fatalf("second resume: %v %v, want false nil", again, err)
	}
	if !bytes.Equal(vpmm.HostBytes(kv, size), pattern(7, size)) ||
		!bytes.Equal(vpmm.HostBytes(other, 2*page), pattern(8, 2*page)) {
		t.Fatal("bytes changed across pause and resume")
	}
	base, sz, err := p.Lookup(kv + 100)
	must(t, err)
	if base != kv || sz != uint64(size) {
		t.Fatalf("lookup after resume: %x %d", base, sz)
	}
	must(t, p.Check())
	for _, ptr := range []uintptr{kv, other, keep} {
		must(t, p.Free(ptr, vpmm.DefaultStream))
	}
}

func TestPauseWithoutBackupReleasesMemory(t *testing.T) {
	p := newPool(t, hostConfig(256))
	ptr, err := p.MallocTagged(4*page, vpmm.DefaultStream, "scratch", false)
	must(t, err)
	did, err := p.Pause("scratch")
	must(t, err)
	must(t, p.Trim(0))
	if s := stats(t, p); !did || s.MappedBytes != 0 || s.BackupBytes != 0 {
		t.Fatalf("paused %v, mapped %d backup %d", did, s.MappedBytes, s.BackupBytes)
	}
	did, err = p.Resume("")
	must(t, err)
	if s := stats(t, p); !did || s.MappedBytes != 4*page {
		t.Fatalf("resumed %v, mapped %d", did, s.MappedBytes)
	}
	must(t, p.Free(ptr, vpmm.DefaultStream))
}

func TestWithRegionTagsAllocations(t *testing.T) {
	p := newPool(t, hostConfig(256))
	var tagged uintptr
	must(t, vpmm.WithRegion("scoped", true, func() error {
		var err error
		tagged, err = p.Malloc(page, vpmm.DefaultStream)
		return err
	}))
	untagged, err := p.Malloc(page, vpmm.DefaultStream)
	must(t, err)
	copy(vpmm.HostBytes(tagged, page), pattern(3, page))
	ts, err := p.TagStats("scoped")
	must(t, err)
	all, err := p.TagStats("")
	must(t, err)
	if ts.NLive != 1 || all.NLive != 1 {
		t.Fatalf("scoped %+v all %+v", ts, all)
	}
	if n, err := p.PauseCount(""); err != nil || n != 1 {
		t.Fatalf("pause all: %d %v", n, err)
	}
	if n, err := p.ResumeCount(""); err != nil || n != 1 {
		t.Fatalf("resume all: %d %v", n, err)
	}
	if !bytes.Equal(vpmm.HostBytes(tagged, page), pattern(3, page)) {
		t.Fatal("scoped allocation lost its bytes")
	}
	must(t, p.Free(tagged, vpmm.DefaultStream))
	must(t, p.Free(untagged, vpmm.DefaultStream))
}

func TestPrepareBackupsPinsBeforeTheFirstPause(t *testing.T) {
	p := newPool(t, hostConfig(256))
	kv, err := p.MallocTagged(3*page, vpmm.DefaultStream, "ahead", true)
	must(t, err)
	cached, err := p.PrepareBackups("ahead")
	must(t, err)
	if cached != 3*page {
		t.Fatalf("prepare cached %d bytes, want %d", cached, 3*page)
	}
	if _, err := p.Pause("ahead"); err != nil {
		t.Fatal(err)
	}
	s := stats(t, p)
	if s.BackupCacheBytes != 0 || s.BackupPinnedBytes != 3*page {
		t.Fatalf("after pause: cache %d pinned %d, want 0 and %d (nothing pinned anew)",
			s.BackupCacheBytes, s.BackupPinnedBytes, 3*page)
	}
	if _, err := p.Resume("ahead"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PrepareBackups("never-used"); !errors.Is(err, vpmm.ErrInvalidArgument) {
		t.Fatalf("unknown tag: %v, want ErrInvalidArgument", err)
	}
	must(t, p.Free(kv, vpmm.DefaultStream))
}
