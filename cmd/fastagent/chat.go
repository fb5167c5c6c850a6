package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/fastagent/fastagent/agent"
	"github.com/fastagent/fastagent/internal/httpagent"
	"github.com/fastagent/fastagent/workflows"
)

const chatHelp = `Type a message and press Enter to send it. While the agent answers:
  /abort          stop the running turn
  /steer <text>   tell the agent something it reads before its next step
  y / n           answer a tool call waiting for your approval
  <text>          answer a question the agent asked you
Any time:
  /compact        summarise the session's older history now
  /new            start a new session
  /session        print the session ID (resume it with --session)
  /help           this text
  /quit or Ctrl-D leave (the session stays; Ctrl-C stops a running turn)`

func newChat(g *globals) *cobra.Command {
	var session, base, agentName string
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Talk to a running fastagent in the terminal: streaming answers, tool lines, approvals asked inline, /abort, /steer",
		Long: "Opens an interactive conversation with the agent served at --url (fastagent dev or start).\n" +
			"Each line you type is a turn; the answer streams as it comes, tool calls and their results are shown\n" +
			"as lines, and a tool call that needs approval is shown with its arguments and asked inline.\n" +
			"A dropped connection or a restarting ingress is resumed. /help lists the commands.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if session == "" {
				session = newChatSession()
			}
			c := &chat{
				session: session,
				base:    agentBase(base, agentName),
				token:   g.apiToken(),
				out:     cmd.OutOrStdout(),
			}
			return c.run(cmd.Context(), cmd.InOrStdin())
		},
	}
	cmd.Flags().StringVarP(&session, "session", "s", os.Getenv("FASTAGENT_SESSION"), "session to continue (default: a new one) [FASTAGENT_SESSION]")
	bindURL(cmd.Flags(), &base, &agentName)
	return cmd
}

func newChatSession() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "chat-" + time.Now().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// chat is one terminal conversation.
type chat struct {
	session string
	base    string
	token   string
	out     io.Writer
	mu      sync.Mutex // serialises writes to out
}

func (c *chat) printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.out, format, args...)
}

// run reads lines until EOF or /quit: each line is a turn or a command.
func (c *chat) run(ctx context.Context, in io.Reader) error {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	c.printf("fastagent chat · session %s · %s\n/help for commands, Ctrl-D to leave\n", c.session, c.base)
	var queued []string
	for {
		var line string
		if len(queued) > 0 {
			line, queued = queued[0], queued[1:]
			c.printf("> %s\n", line)
		} else {
			c.printf("> ")
			l, ok := <-lines
			if !ok {
				c.printf("\n")
				return nil
			}
			line = l
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case line == "/quit" || line == "/exit":
			return nil
		case strings.HasPrefix(line, "/"):
			c.command(line, false)
		default:
			more, ok := c.turn(ctx, line, lines)
			queued = append(queued, more...)
			if !ok {
				c.printf("\n")
				return nil
			}
		}
	}
}

// command runs a slash command; running says whether a turn is running.
func (c *chat) command(line string, running bool) {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	var err error
	switch name {
	case "/help":
		c.printf("%s\n", chatHelp)
	case "/session":
		c.printf("session %s (fastagent chat --session %s)\n", c.session, c.session)
	case "/new":
		if running {
			c.printf("a turn is running: /abort it first\n")
			return
		}
		c.session = newChatSession()
		c.printf("new session %s\n", c.session)
	case "/abort":
		_, err = c.call(http.MethodPost, "/abort", `{"reason":"aborted in fastagent chat"}`)
		if err == nil && !running {
			c.printf("nothing to abort\n")
		}
	case "/steer":
		if arg == "" {
			c.printf("usage: /steer <text>\n")
			return
		}
		b, _ := json.Marshal(map[string]string{"text": arg})
		if _, err = c.call(http.MethodPost, "/steer", string(b)); err == nil {
			c.printf("· steering: %s\n", arg)
		}
	case "/compact":
		if _, err = c.call(http.MethodPost, "/compact", `{}`); err == nil {
			c.printf("· compacted\n")
		}
	default:
		c.printf("unknown command %s (/help lists them)\n", name)
	}
	if err != nil {
		c.printf("✗ %s: %v\n", name, err)
	}
}

// turn runs one turn, printing its events, while lines typed meanwhile
// steer, abort or answer approvals; other text typed meanwhile is returned,
// to be sent as the next turns. ok is false when input ended.
func (c *chat) turn(ctx context.Context, text string, lines <-chan string) (queued []string, ok bool) {
	tctx, stop := signal.NotifyContext(ctx, os.Interrupt) // Ctrl-C stops this turn, not the chat
	defer stop()
	a := &httpagent.Agent{BaseURL: c.base, Reconnects: 5, ResumeWithin: httpagent.DefaultResumeWithin, Token: c.token}
	done := make(chan error, 1)
	// The stream announces each call waiting for approval; they are asked
	// one at a time, in order.
	var mu sync.Mutex
	var pending []agent.Event
	announced := make(chan struct{}, 1)
	onApproval := func(ev agent.Event) {
		mu.Lock()
		pending = append(pending, ev)
		mu.Unlock()
		select {
		case announced <- struct{}{}:
		default:
		}
	}
	go func() {
		done <- runInvoke(tctx, a, c.session, text, false, lockedWriter{c}, lockedWriter{c}, onApproval)
	}()

	// waiting is the approval (or question) being asked.
	var waiting *agent.Event
	next := func() {
		mu.Lock()
		defer mu.Unlock()
		if waiting == nil && len(pending) > 0 {
			p := pending[0]
			pending = pending[1:]
			waiting = &p
			if p.Type == agent.TypeQuestionAsked {
				c.printf("your answer (one line): ")
			} else {
				c.printf("approve %s? [y/n] ", p.Name)
			}
		}
	}
	done1 := func() {
		mu.Lock()
		waiting = nil
		mu.Unlock()
		next()
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				c.printf("✗ %v\n", err)
			}
			return queued, true
		case <-announced:
			next()
		case line, ok := <-lines:
			if !ok {
				stop() // input ended: stop the turn, report how it ended
				if err := <-done; err != nil {
					c.printf("✗ %v\n", err)
				}
				return queued, false
			}
			line = strings.TrimSpace(line)
			switch {
			case waiting != nil && waiting.Type == agent.TypeQuestionAsked && line != "" && !strings.HasPrefix(line, "/"):
				c.answer(waiting.ID, line)
				done1()
			case waiting != nil && waiting.Type == agent.TypeApprovalRequested && (line == "y" || line == "yes" || line == "n" || line == "no"):
				c.decide(pendingOf(*waiting), line[0] == 'y')
				done1()
			case strings.HasPrefix(line, "/"):
				c.command(line, true)
			case line != "":
				queued = append(queued, line)
				c.printf("· queued: sent when this answer ends (/steer <text> tells the agent now)\n")
			}
		}
	}
}

// decide approves or denies p, bound to the hashes that were shown.
func (c *chat) decide(p workflows.PendingApproval, approve bool) {
	if _, err := c.call(http.MethodPost, "/approvals/"+url.PathEscape(p.Call), approvalBody(p, approve, "denied in fastagent chat")); err != nil {
		c.printf("✗ %v\n", err)
		return
	}
	if approve {
		c.printf("✓ approved %s\n", p.Tool)
	} else {
		c.printf("✗ denied %s\n", p.Tool)
	}
}

// answer sends text as the answer to the question of call.
func (c *chat) answer(call, text string) {
	b, _ := json.Marshal(map[string]string{"text": text})
	if _, err := c.call(http.MethodPost, "/answers/"+url.PathEscape(call), string(b)); err != nil {
		c.printf("✗ %v\n", err)
	}
}

func (c *chat) call(method, rest, body string) ([]byte, error) {
	return call(c.token, method, c.base+"/sessions/"+url.PathEscape(c.session)+rest, body)
}

// lockedWriter writes through the chat's lock, so a turn's stream and the
// prompts of the input loop do not interleave mid-line.
type lockedWriter struct{ c *chat }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	return w.c.out.Write(p)
}
