package activities

import (
	"context"
	"slices"
	"strings"

	"github.com/fastagent/fastagent/internal/llm"
	"github.com/fastagent/fastagent/internal/memory"
	"github.com/fastagent/fastagent/transcript"
)

// injectMemories puts the memories most relevant to the turn's prompt (the
// branch's last user message) before that message's text, when
// memory.inject asks for it: a delimited <memories> block of data in the
// user's turn, never in the system prompt — a shared memory is text a model
// wrote in someone else's session, and gets no authority from its place.
// The block is in the request only (the stored message is untouched), at
// the same place for every step of a turn, so the cached prefix up to it
// stays valid. A failed recall leaves the prompt as it is.
func (a *Activities) injectMemories(ctx context.Context, s modelStep, req *llm.Request) {
	cfg := s.def.Config.Memory
	if !cfg.Enabled || cfg.Inject.Count <= 0 {
		return
	}
	last := -1
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == transcript.RoleUser {
			last = i
			break
		}
	}
	if last < 0 || strings.TrimSpace(req.Messages[last].Text) == "" {
		return
	}
	block, err := memory.Inject(ctx, a.Store, a.AgentName(), s.call.Session, req.Messages[last].Text, cfg.Inject.Count, cfg.InjectTokens())
	if err != nil {
		a.log().Warn("memory: recall for the prompt failed; the step runs without memories", "session", s.call.Session, "error", err)
		return
	}
	if block == "" {
		return
	}
	msgs := slices.Clone(req.Messages)
	msgs[last].Text = block + "\n\n" + msgs[last].Text
	req.Messages = msgs
}
