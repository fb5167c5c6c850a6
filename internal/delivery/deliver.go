package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/fastagent/fastagent/internal/store"
)

// Refs keeps platform references (store.Store has these methods): the
// first write of a key wins, a later one is a no-op.
type Refs interface {
	SaveReply(ctx context.Context, session, key, ref string) error
	Reply(ctx context.Context, session, key string) (string, error)
}

// File is a file to send.
type File struct {
	// Name is the file's base name.
	Name string
	Data []byte
}

// Request is one send, as a Sender gets it.
type Request struct {
	// Dest is the target's destination in the kind's terms (Target.Dest).
	Dest string
	// Text is the message (empty when File is set).
	Text string
	// File is the file to send (nil for a message).
	File *File
	// Mark is the send's identity on the platform: stable across retries
	// and unique across sends (a hash of Session and Key). A sender that
	// can mark or deduplicate what it posts with it (message metadata, a
	// uuid, a hidden marker) looks for it before posting again.
	Mark string
	// Session and Key are where the send's references are kept in Refs: a
	// sender may keep its progress under Key + "#…" (first write wins).
	Session, Key string
	Refs         Refs
}

// Sender sends messages and files to a channel's destinations. A
// channel's replier implements it, with the worker's credentials.
type Sender interface {
	// Kind is the channel kind ("slack", "feishu"…).
	Kind() string
	// Deliver sends req once and returns the platform's reference of what
	// it sent. Called again with the same request (a retry), it must not
	// send a second time what an earlier call sent. An error a retry
	// cannot fix (a destination that does not exist, a file the platform
	// does not take) is wrapped with Permanent.
	Deliver(ctx context.Context, req Request) (ref string, err error)
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one a retry cannot fix; nil stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// IsPermanent reports whether err (or one it wraps) was marked Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// Mark is the platform identity of the send keyed key in session: 32 hex
// digits of their SHA-256.
func Mark(session, key string) string {
	sum := sha256.Sum256([]byte(session + "\x00" + key))
	return "fa" + hex.EncodeToString(sum[:15])
}

// refPrefix marks a stored reference as a completed delivery.
const refPrefix = "sent "

// Senders indexes senders by kind.
type Senders map[string]Sender

// Add indexes s under its kind (and, for Feishu/Lark, only that one).
func (ss Senders) Add(s Sender) { ss[s.Kind()] = s }

// Deliver sends one message or file to t through its channel's sender,
// exactly once under (session, key): when a reference is kept under them,
// the send happened and nothing is sent again; else the sender sends (and
// itself finds a send an earlier attempt made but could not record), and
// the reference is kept. It returns the reference. A target whose channel
// is not configured is a Permanent error.
func Deliver(ctx context.Context, senders Senders, refs Refs, t Target, session, key, text string, file *File) (string, error) {
	if refs == nil || session == "" || key == "" {
		return "", Permanent(errors.New("delivery: no session store to keep the send's reference in"))
	}
	if ref, err := refs.Reply(ctx, session, key); err == nil {
		return strings.TrimPrefix(ref, refPrefix), nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("delivery: read the reference of %s: %w", key, err)
	}
	s := senders[t.Kind]
	if s == nil {
		return "", Permanent(fmt.Errorf("no %s channel is configured on this worker (add channels/%s.yaml and its secrets)", t.Kind, t.Kind))
	}
	ref, err := s.Deliver(ctx, Request{Dest: t.Dest, Text: text, File: file, Mark: Mark(session, key),
		Session: session, Key: key, Refs: refs})
	if err != nil {
		return "", err
	}
	if ref == "" {
		ref = "-"
	}
	if err := refs.SaveReply(context.WithoutCancel(ctx), session, key, refPrefix+ref); err != nil {
		return "", fmt.Errorf("delivery: keep the reference of %s: %w", key, err)
	}
	return ref, nil
}
