package vpmm

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// Config.Ledger joins the pool to a ledger (vpmm_config.ledger); the pool's
// Config reports it; a name that is no ledger name is refused.
func TestConfigLedgerJoinsAndIsReported(t *testing.T) {
	name := fmt.Sprintf("go-ledger-%d", os.Getpid())
	defer os.Remove("/dev/shm/vpmm.ledger." + name)
	c := DefaultConfig()
	c.Backend = BackendHost
	c.PageSize = 64 << 10
	c.VASize = 64 * c.PageSize
	c.Ledger = name
	p, err := NewPool(&c)
	if err != nil {
		t.Fatalf("NewPool: %v", err)
	}
	got, err := p.Config()
	p.Close()
	if err != nil || got.Ledger != name {
		t.Fatalf("Config().Ledger = %q, %v; want %q", got.Ledger, err, name)
	}
	if _, err := os.Stat("/dev/shm/vpmm.ledger." + name); err != nil {
		t.Fatalf("no ledger segment: %v", err)
	}
	c.Ledger = "../etc"
	if _, err := NewPool(&c); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NewPool with ledger \"../etc\": %v, want ErrInvalidArgument", err)
	}
}
