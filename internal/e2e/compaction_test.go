package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/agent/agenttest"
	"github.com/fastagent/fastagent/internal/models"
	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
	"github.com/fastagent/fastagent/transcript"
	"github.com/fastagent/fastagent/workflows"
)

// compactionConfig gives the scripted model a 4,000-token window.
const compactionConfig = "contextWindow: 4000\ncompaction:\n  reserveTokens: 1000\n  keepRecentTokens: 1000\ncodingTools: [read]\n"

// bigFile is what the read tool returns each turn (about 700 tokens).
var bigFile = strings.Repeat("line of a large tool output, repeated to fill the context window\n", 44)

// compactingModel scripts the model of a long session: each prompt reads
// big.txt, then answers; a summary request gets a short summary. overflow
// makes the next turn request answer OpenAI's context_length_exceeded once.
type compactingModel struct {
	mu        sync.Mutex
	overflow  bool
	summaries int
	calls     int
}

func (m *compactingModel) handle(req modelserver.Request) modelserver.Reply {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(req.Messages) > 0 && strings.Contains(req.Messages[0].Content, "context summarization assistant") {
		m.summaries++
		return modelserver.Reply{Text: []string{fmt.Sprintf("## Goal\nRead big.txt on every turn.\n\n## Progress\n### Done\n- [x] %d summaries so far", m.summaries)}}
	}
	if m.overflow {
		m.overflow = false
		return modelserver.ContextLengthExceeded(4000, 4100)
	}
	m.calls++
	if last := req.Messages[len(req.Messages)-1]; last.Role != "tool" {
		return modelserver.Reply{ToolCalls: []modelserver.ToolCall{{ID: fmt.Sprintf("call-%d", m.calls), Name: "read", Args: `{"path":"big.txt"}`}}}
	}
	return modelserver.Reply{Text: []string{"read it; ", "nothing new."}}
}

func (m *compactingModel) forceOverflow() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.overflow = true
}

// wireTokens estimates a request as received, the way the runtime
// estimates what it sends (internal/models: a token per four bytes).
func wireTokens(req modelserver.Request) int {
	n := 4
	for _, m := range req.Messages {
		n += 4 + models.EstimateText(m.Content) + models.EstimateText(m.ToolCallID)
		for _, tc := range m.ToolCalls {
			n += 4 + models.EstimateText(tc.ID) + models.EstimateText(tc.Name) + models.EstimateText(tc.Args)
		}
		for _, p := range m.Parts {
			if p.Type == "image_url" {
				n += 1200
			}
		}
	}
	for _, t := range req.Tools {
		n += 4 + models.EstimateText(t.Name) + models.EstimateText(t.Description) + models.EstimateText(string(t.Parameters))
	}
	return n
}

// TestCompactionLongSession: 300 turns with large tool outputs against a
// 4,000-token window, sent one after another as a client sends them (none
// sent twice), never fail, not even where the session continues as new;
// every request the model receives stays under the window; a forced
// context overflow on turn 150 is recovered by
// compacting; a manual compaction answers with what it did. It prints the
// peak request size, the compactions run and the history bytes per turn.
func TestCompactionLongSession(t *testing.T) {
	const turns, overflowTurn, window = 300, 150, 4000
	e := newEnv(t)
	e.writeConfig(fastRetries + compactionConfig)
	if err := os.WriteFile(filepath.Join(e.kit.Dir, "big.txt"), []byte(bigFile), 0o644); err != nil {
		t.Fatal(err)
	}
	model := &compactingModel{}
	e.kit.Model.Handle(model.handle)
	e.startWorker()
	const session = "long-session"
	start := time.Now()
	compactionsBefore := 0
	for i := 1; i <= turns; i++ {
		if i == overflowTurn {
			model.forceOverflow()
			compactionsBefore = len(compactions(t, e, session))
		}
		// A client: each turn sent once, after the previous one answered;
		// nothing is sent again (not even on session_busy).
		term := agenttest.CheckTerminal(t, collect(t, e.agent, context.Background(), session, fmt.Sprintf("turn %d: read big.txt", i)))
		if term.Type != agent.TypeCompleted {
			id := workflows.WorkflowID(session)
			for _, run := range runIDs(t, e, id) {
				tl := strings.Split(timeline(fetchHistory(t, e, id, run)), "\n")
				t.Logf("run %s, last events:\n%s", run, strings.Join(tl[max(0, len(tl)-45):], "\n"))
			}
			t.Fatalf("turn %d (%s): %+v", i, time.Now().Format("15:04:05.000"), term)
		}
		if i == overflowTurn && len(compactions(t, e, session)) <= compactionsBefore {
			t.Fatalf("turn %d recovered from the overflow without compacting", i)
		}
	}
	elapsed := time.Since(start)

	peak, peakSeq := 0, 0
	for _, req := range e.kit.Model.Requests() {
		if n := wireTokens(req); n > peak {
			peak, peakSeq = n, req.Seq
		}
	}
	if peak > window {
		t.Errorf("request %d held about %d tokens, over the %d-token window", peakSeq, peak, window)
	}
	comps := compactions(t, e, session)
	if len(comps) < 2 {
		t.Errorf("%d compactions in %d turns, want several", len(comps), turns)
	}

	res, err := e.agent.Compact(context.Background(), session)
	if err != nil {
		t.Fatalf("manual compaction: %v", err)
	}
	if res.EntryID == "" && res.Skipped == "" {
		t.Errorf("manual compaction answered %+v", res)
	}

	var histBytes, events int
	id := workflows.WorkflowID(session)
	runs := runIDs(t, e, id)
	for _, run := range runs {
		h := fetchHistory(t, e, id, run)
		histBytes += proto.Size(h)
		events += len(h.Events)
	}
	t.Logf("compaction figures: %d turns in %s; peak request ~%d tokens of a %d-token window (threshold %d); "+
		"%d compactions (%d summary calls); history %d bytes in %d events over %d runs = %d bytes/turn",
		turns, elapsed.Round(time.Second), peak, window, window-1000, len(comps), model.summaries, histBytes, events, len(runs), histBytes/turns)
}

// TestCompactionDisabled: with compaction off, a context overflow fails the
// turn with context_overflow and a message that says why.
func TestCompactionDisabled(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(fastRetries + "compaction: {enabled: false}\n")
	e.kit.Model.Enqueue(modelserver.ContextLengthExceeded(4000, 4100))
	e.startWorker()
	evs := collect(t, e.agent, context.Background(), "no-compaction", "hi")
	term := agenttest.CheckTerminal(t, evs)
	if term.Type != agent.TypeFailed || term.Code != agent.CodeContextOverflow || term.Retryable {
		t.Fatalf("want failed context_overflow, not retryable; got %+v", term)
	}
	for _, want := range []string{"context window", "compaction is disabled", "maximum context length"} {
		if !strings.Contains(term.Details, want) {
			t.Errorf("details %q lack %q", term.Details, want)
		}
	}
	if n := len(compactions(t, e, "no-compaction")); n != 0 {
		t.Errorf("%d compactions with compaction off", n)
	}
}

// compactions returns the session's compaction entries.
func compactions(t *testing.T, e *env, session string) []transcript.Compaction {
	t.Helper()
	all, err := e.kit.Store.Entries(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	var out []transcript.Compaction
	for _, en := range all {
		if en.Type == transcript.TypeCompaction && en.Compaction != nil {
			out = append(out, *en.Compaction)
		}
	}
	return out
}
