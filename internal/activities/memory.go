package activities

import (
	"context"
	"strings"

	"github.com/fastagent/fastagent/internal/llm"
	"github.com/fastagent/fastagent/internal/memory"
	"github.com/fastagent/fastagent/transcript"
)

// injectMemories adds the memories most relevant to the turn's prompt (the
// branch's last user message) to the end of the system prompt, when
// memory.inject asks for it: after the stable persona, context files and
// skills, so that a cached prefix stays valid, and the same for every step
// of a turn. A failed recall leaves the prompt as it is.
func (a *Activities) injectMemories(ctx context.Context, s modelStep, req *llm.Request) {
	cfg := s.def.Config.Memory
	if !cfg.Enabled || cfg.Inject.Count <= 0 {
		return
	}
	query := ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == transcript.RoleUser {
			query = m.Text
			break
		}
	}
	if strings.TrimSpace(query) == "" {
		return
	}
	block, err := memory.Inject(ctx, a.Store, a.AgentName(), s.call.Session, query, cfg.Inject.Count, cfg.InjectTokens())
	if err != nil {
		a.log().Warn("memory: recall for the prompt failed; the step runs without memories", "session", s.call.Session, "error", err)
		return
	}
	if block != "" {
		req.System += "\n\n" + block + "\n"
	}
}
