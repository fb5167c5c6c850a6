package lab

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fastagent/fastagent/internal/testsupport/modelserver"
)

// LoadModel is the scripted model of the load curve: every reply starts
// after First (time to first token); a text reply then streams Tokens
// tokens over Stream. A prompt containing "[steps=N]" first gets N replies
// that each call Tool once with Args, as StepsHandler counts them.
type LoadModel struct {
	First  time.Duration
	Stream time.Duration
	Tokens int
	Tool   string
	Args   string
}

// Handler is the model server fallback implementing the model; it is
// stateless, so safe for any number of concurrent sessions.
func (m LoadModel) Handler() func(modelserver.Request) modelserver.Reply {
	tokens := max(1, m.Tokens)
	chunk := m.Stream / time.Duration(tokens)
	text := make([]string, tokens)
	for i := range text {
		text[i] = " tok" + strconv.Itoa(i)
	}
	return func(r modelserver.Request) modelserver.Reply {
		last := r.LastUserText()
		if sm := stepsDirective.FindStringSubmatch(last); sm != nil {
			want, _ := strconv.Atoi(sm[1])
			done := 0
			for i := len(r.Messages) - 1; i >= 0 && r.Messages[i].Role != "user"; i-- {
				if r.Messages[i].Role == "tool" {
					done++
				}
			}
			if done < want {
				return modelserver.Reply{FirstDelay: m.First, ToolCalls: []modelserver.ToolCall{{
					ID: "call_" + strconv.Itoa(done+1), Name: m.Tool, Args: m.Args,
				}}}
			}
		}
		return modelserver.Reply{FirstDelay: m.First, ChunkDelay: chunk, Text: text}
	}
}

// ModelTime sums, per prompt (the last user text of a request), how long
// the model server spent answering its requests (from receipt to the end
// of the stream); requests not finished are counted up to now.
func ModelTime(reqs []modelserver.Request) map[string]time.Duration {
	out := make(map[string]time.Duration)
	now := time.Now()
	for _, r := range reqs {
		end := r.Done
		if end.IsZero() {
			end = now
		}
		out[r.LastUserText()] += end.Sub(r.Received)
	}
	return out
}

// CPUTime is the user+system CPU time used so far by process pid (this
// process when pid is 0 or its own).
func CPUTime(pid int) (time.Duration, error) {
	if pid == 0 || pid == os.Getpid() {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return 0, fmt.Errorf("getrusage: %w", err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces: count from its ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime", pid)
	}
	// Linux reports in clock ticks of USER_HZ, 100 on every supported arch.
	const userHZ = 100
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// LoadAverage is the 1-minute load average from /proc/loadavg ("" when
// unreadable).
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}
