package vpmm

// #include "vpmm.h"
import "C"

import (
	"errors"
	"fmt"
)

// Status is a libvpmm status code (vpmm_status); the codes are pinned
// forever by the C ABI.
type Status int32

// The error statuses (VPMM_ERR_*).
const (
	StatusInvalidArgument Status = C.VPMM_ERR_INVALID_ARGUMENT // null pointer, zero/overflowing size, bad config, unknown tag
	StatusOutOfMemory     Status = C.VPMM_ERR_OUT_OF_MEMORY    // physical memory, VA, limit or reservation exhausted
	StatusUnknownPointer  Status = C.VPMM_ERR_UNKNOWN_POINTER  // free/lookup of a pointer the pool did not hand out
	StatusWrongState      Status = C.VPMM_ERR_WRONG_STATE      // not valid in the object's current state
	StatusUnsupported     Status = C.VPMM_ERR_UNSUPPORTED      // backend not built or not available
	StatusBackend         Status = C.VPMM_ERR_BACKEND          // the driver or host OS failed
	StatusInternal        Status = C.VPMM_ERR_INTERNAL         // an invariant of the pool does not hold (a bug)
	StatusTimeout         Status = C.VPMM_ERR_TIMEOUT          // a wait ran out; nothing changed
)

// String is the library's name of the status, e.g. "VPMM_ERR_OUT_OF_MEMORY".
func (s Status) String() string {
	return C.GoString(C.vpmm_status_string(C.vpmm_status(s)))
}

// Error is a failed libvpmm call: its status and the library's message,
// which names the call and the offending value.
type Error struct {
	Status  Status
	Message string
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Message == "" {
		return "vpmm: " + e.Status.String()
	}
	return fmt.Sprintf("vpmm: %s (%s)", e.Message, e.Status)
}

// Is makes errors.Is(err, ErrOutOfMemory) (and the other sentinels) true
// for every *Error of that status, whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Status == e.Status
}

// Sentinel errors, one per status, for errors.Is.
var (
	ErrInvalidArgument = &Error{Status: StatusInvalidArgument}
	ErrOutOfMemory     = &Error{Status: StatusOutOfMemory}
	ErrUnknownPointer  = &Error{Status: StatusUnknownPointer}
	ErrWrongState      = &Error{Status: StatusWrongState}
	ErrUnsupported     = &Error{Status: StatusUnsupported}
	ErrBackend         = &Error{Status: StatusBackend}
	ErrInternal        = &Error{Status: StatusInternal}
	ErrTimeout         = &Error{Status: StatusTimeout}
)

// ErrClosed is returned by every method of a Pool after Close.
var ErrClosed = errors.New("vpmm: pool is closed")
