package channels

import (
	"strings"

	"github.com/fastagent/fastagent/internal/wire"
)

// CommandOf is the chat command text is (wire.CommandStop, CommandNew,
// CommandStatus, CommandHelp), or "" when it is not exactly one: a
// command is the message's whole text, "/stop" (any case), optionally
// addressed to a bot as "/stop@name" (the door has removed a mention of
// the bot already).
func CommandOf(text string) string {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "/") || strings.ContainsAny(t, " \t\n") {
		return ""
	}
	name, _, _ := strings.Cut(strings.ToLower(t[1:]), "@")
	switch name {
	case wire.CommandStop, wire.CommandNew, wire.CommandStatus, wire.CommandHelp:
		return name
	}
	return ""
}
