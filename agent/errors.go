package agent

import "errors"

// Error is a failure that carries one of the contract's codes (Code*), so
// that every door maps it the same way: an HTTP status in the ingress, a
// message in a channel, an exit code in the CLI.
type Error struct {
	Code    string
	Message string
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// NewError returns an *Error with code and message.
func NewError(code, message string) *Error { return &Error{Code: code, Message: message} }

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}
