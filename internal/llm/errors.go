package llm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// Error kinds.
const (
	KindRateLimit      = "rate_limit"      // HTTP 429; retryable after RetryAfter
	KindServer         = "server"          // HTTP 5xx, 408, 409; retryable
	KindNetwork        = "network"         // connection failed or broke mid-stream; retryable
	KindStall          = "stall"           // no bytes for StallTimeout; retryable
	KindTruncated      = "truncated"       // stream ended without a finish reason; retryable
	KindAuth           = "auth"            // HTTP 401/403; check the API key
	KindNotFound       = "not_found"       // HTTP 404; check the model name and endpoint
	KindInvalidRequest = "invalid_request" // other 4xx or a request that could not be built
	// KindContextOverflow: the provider refused the request as longer than
	// the model's context window; compacting the context can help, retrying
	// it as is cannot.
	KindContextOverflow = "context_overflow"
	KindCanceled        = "canceled" // the caller's context ended
)

// Error is every failure Generate returns. Message is meant for people and
// never contains the API key.
type Error struct {
	Model      string        // "provider/model"
	Kind       string        // one of the Kind constants
	Status     int           // HTTP status, 0 when there was no response
	RetryAfter time.Duration // the provider's Retry-After, 0 when absent
	Retryable  bool          // whether the same call may succeed later
	Message    string

	err error // the underlying cause, for errors.Is/As
}

// Error implements error.
func (e *Error) Error() string {
	if e.Model == "" {
		return "llm: " + e.Message
	}
	return "llm: " + e.Model + ": " + e.Message
}

// Unwrap returns the underlying cause (ctx.Err() for KindCanceled).
func (e *Error) Unwrap() error { return e.err }

// classify turns what a failed call left behind into an *Error. callCtx is
// the call's own context, whose cause tells a stall apart.
func (m *model) classify(ctx, callCtx context.Context, rec *recorder, err error) *Error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return &Error{Model: m.spec, Kind: KindCanceled, Message: "call canceled: " + ctxErr.Error(), err: ctxErr}
	}
	if errors.Is(context.Cause(callCtx), errStalled) {
		return &Error{Model: m.spec, Kind: KindStall, Retryable: true,
			Message: "the model stream stalled for " + formatDuration(m.stall), err: errStalled}
	}
	if m.opaque {
		return m.classifyWrapped(err)
	}
	attempted, status, retryAfter, netErr := rec.snapshot()
	detail := m.scrub(providerMessage(err))
	e := &Error{Model: m.spec, Status: status, RetryAfter: retryAfter, err: err}
	switch {
	case !attempted:
		e.Kind = KindInvalidRequest
		e.Message = "could not build the request: " + m.scrub(err.Error())
	case status == 0:
		e.Kind, e.Retryable = KindNetwork, true
		cause := err
		if netErr != nil {
			cause = netErr
		}
		e.Message = fmt.Sprintf("could not reach the model provider at %s: %s", m.baseURL, m.scrub(cause.Error()))
	case status == http.StatusOK && streamErrorType(err) != "":
		m.classifyStreamError(e, streamErrorType(err), err)
	case status == http.StatusOK:
		e.Kind, e.Retryable = KindNetwork, true
		e.Message = "the connection to the model provider broke mid-stream: " + m.scrub(streamCause(err))
	case status == http.StatusTooManyRequests:
		e.Kind, e.Retryable = KindRateLimit, true
		e.Message = "the model provider is rate limiting requests (HTTP 429)"
		if retryAfter > 0 {
			e.Message += "; retry after " + formatDuration(retryAfter)
		}
		e.Message += withDetail(detail)
	case status >= 500 || status == http.StatusRequestTimeout || status == http.StatusConflict:
		e.Kind, e.Retryable = KindServer, true
		e.Message = fmt.Sprintf("the model provider failed (HTTP %d)%s", status, withDetail(detail))
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		e.Kind = KindAuth
		if m.keyEnv != "" {
			e.Message = fmt.Sprintf("the model provider rejected the API key (HTTP %d); check %s", status, m.keyEnv)
		} else {
			e.Message = fmt.Sprintf("the model server refused the request (HTTP %d); check %s", status, m.urlEnv)
		}
	case isOverflow(detail) || isOverflow(m.scrub(err.Error())):
		e.Kind = KindContextOverflow
		e.Message = fmt.Sprintf("the request is longer than the model's context window (HTTP %d)%s", status, withDetail(detail))
	case status == http.StatusNotFound:
		e.Kind = KindNotFound
		e.Message = fmt.Sprintf("the model provider answered HTTP 404; check the model name %q%s%s",
			m.name, m.checkURLHint(), withDetail(detail))
	default:
		e.Kind = KindInvalidRequest
		e.Message = fmt.Sprintf("the model provider rejected the request (HTTP %d)%s; check the model name, tools and conversation",
			status, withDetail(detail))
	}
	return e
}

// classifyWrapped classifies an error of a wrapped client (Wrap), whose
// HTTP exchange is not visible: a context overflow is permanent, anything
// else is retried by the step's retry policy (a permanent error then fails
// the turn after the policy's attempts, with the client's own message).
func (m *model) classifyWrapped(err error) *Error {
	msg := m.scrub(err.Error())
	if isOverflow(msg) {
		return &Error{Model: m.spec, Kind: KindContextOverflow, err: err,
			Message: "the request is longer than the model's context window: " + msg}
	}
	return &Error{Model: m.spec, Kind: KindServer, Retryable: true, err: err,
		Message: "the model client failed: " + msg}
}

func (m *model) checkURLHint() string {
	if m.urlEnv == "" {
		return ""
	}
	return " and " + m.urlEnv + " (" + m.baseURL + ")"
}

// streamErrorRE finds the error type of an Anthropic "error" event in
// langchaingo's rendering of it ("received error event: map[error:map[
// message:Overloaded type:overloaded_error] type:error]").
var streamErrorRE = regexp.MustCompile(`received error event: .*type:([a-z_]+_error)`)

// streamErrorType returns the type of an error event the provider sent
// mid-stream, "" when err is not one.
func streamErrorType(err error) string {
	if err == nil {
		return ""
	}
	if sm := streamErrorRE.FindStringSubmatch(err.Error()); sm != nil {
		return sm[1]
	}
	return ""
}

// classifyStreamError fills e for an error event that arrived after an
// HTTP 200: overloaded and server errors are retryable like a 529/5xx, a
// rate limit like a 429, anything else is retried as a broken stream.
func (m *model) classifyStreamError(e *Error, typ string, err error) {
	switch typ {
	case "overloaded_error", "api_error":
		e.Kind, e.Retryable = KindServer, true
		e.Message = "the model provider failed mid-stream (" + typ + ")"
	case "rate_limit_error":
		e.Kind, e.Retryable = KindRateLimit, true
		e.Message = "the model provider is rate limiting requests (rate_limit_error mid-stream)"
	default:
		e.Kind, e.Retryable = KindNetwork, true
		e.Message = "the model stream ended with an error event: " + m.scrub(err.Error())
	}
}

// overflowRE matches the providers' wording for a request longer than the
// context window: OpenAI (context_length_exceeded, "maximum context
// length", "exceeds the context window"), Anthropic ("prompt is too long"),
// Ollama and llama.cpp ("input length exceeds the context length", "exceeds
// the available context size").
var overflowRE = regexp.MustCompile(`(?i)context_length_exceeded|maximum context length|prompt is too long|` +
	`exceeds the context window|context window exceeded|context length exceeded|` +
	`input length exceeds the (maximum )?context length|exceeds the available context size`)

// isOverflow reports whether a provider message says the context is too long.
func isOverflow(msg string) bool { return msg != "" && overflowRE.MatchString(msg) }

// statusRE finds the provider's own message in langchaingo's errors, which
// read "API returned unexpected status code: 429: <message>".
var statusRE = regexp.MustCompile(`status code: \d{3}: (.*)$`)

// providerMessage extracts the provider's error message, shortened.
func providerMessage(err error) string {
	if err == nil {
		return ""
	}
	sm := statusRE.FindStringSubmatch(err.Error())
	if sm == nil {
		return ""
	}
	msg := strings.TrimSpace(sm[1])
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	return msg
}

// streamCause names why a stream broke, in the plainest words available.
func streamCause(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected EOF"
	}
	return err.Error()
}

func withDetail(d string) string {
	if d == "" {
		return ""
	}
	return ": " + d
}

// scrub removes the API key from s, in case a provider or library echoed it.
func (m *model) scrub(s string) string {
	if m.secret == "" || len(m.secret) < 4 {
		return s
	}
	return strings.ReplaceAll(s, m.secret, "[redacted]")
}

// formatDuration prints whole seconds as "60s" and anything else as
// time.Duration does ("300ms", "1.5s").
func formatDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}
