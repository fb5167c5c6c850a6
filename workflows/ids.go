package workflows

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"go.temporal.io/sdk/workflow"
)

// The random parts of entry IDs (<chain prefix>-<turn nonce>-<n>) are
// derived from what the history already holds, not drawn by SideEffect:
// a marker per draw costs history bytes for nothing workflow info cannot
// give, and replays see the same values either way.

// chainPrefix is the entry ID prefix of a new workflow chain: a digest of
// its first run's original run ID, which a reset keeps (the reset run's
// replay derives the same prefix) and a session started again after a
// terminate does not.
func chainPrefix(ctx workflow.Context) string {
	info := workflow.GetInfo(ctx)
	id := info.OriginalRunID
	if id == "" {
		id = info.WorkflowExecution.RunID
	}
	return digest8("chain", id)
}

// turnNonce is a turn's (or compaction's, rewind's) ID part: a digest of
// the chain prefix and the workflow time the turn began at. Workflow time
// is the recorded start of the workflow task, so a replay derives the same
// nonce; a reset run that runs a turn again does so at a later time, so its
// entries never take the IDs the first run stored.
func turnNonce(ctx workflow.Context, prefix string) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(workflow.Now(ctx).UnixNano()))
	return digest8(prefix, string(b[:]))
}

func digest8(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:4])
}
