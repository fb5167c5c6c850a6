package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/slack-go/slack"

	"github.com/fastagent/fastagent/internal/wire"
)

// actionStop is the action ID of a live reply's Stop button.
const actionStop = "fastagent_stop"

// stopValue is what a Stop button carries back: the answered message (the
// turn to stop), the thread its session lives in, who started the turn
// and the workspace. Slack signs the whole interaction, and builds it from
// the message as the bot posted it, so a clicker cannot alter it.
type stopValue struct {
	// Message is the ts of the user message whose turn the button stops.
	Message string `json:"m"`
	// Thread is the reply's thread ("" at the top level).
	Thread string `json:"r,omitempty"`
	// User is the person who started the turn.
	User string `json:"u"`
	// Team is the workspace.
	Team string `json:"t,omitempty"`
}

// stopButton is the actions block with the Stop button of the turn that
// answers message (nil when the target does not say which message and
// whose turn it is).
func stopButton(team, thread, message, user string) slack.Block {
	if message == "" || user == "" {
		return nil
	}
	v, _ := json.Marshal(stopValue{Message: message, Thread: thread, User: user, Team: team})
	return slack.NewActionBlock("fastagent_stop",
		slack.NewButtonBlockElement(actionStop, string(v), slack.NewTextBlockObject(slack.PlainTextType, "⏹ Stop", true, false)).WithStyle(slack.StyleDanger))
}

// stopClick turns a click on a live reply's Stop button into the stop
// command for that reply's turn: the same path as /stop in the thread, so
// a second click finds the turn stopping and is told nothing is running.
// Only the person who started the turn, or one of the channel file's
// admins, may stop it; anyone else is told so privately (response_url)
// and nothing is stopped (nil message).
func (d *Door) stopClick(ctx context.Context, cb *slack.InteractionCallback, a *slack.BlockAction) (*wire.ChatMessage, error) {
	var v stopValue
	if err := json.Unmarshal([]byte(a.Value), &v); err != nil || v.Message == "" || v.User == "" {
		return nil, fmt.Errorf("slack: interaction: stop button without a turn: %q", a.Value)
	}
	if cb.User.ID == "" || cb.Channel.ID == "" || a.ActionTs == "" {
		return nil, fmt.Errorf("slack: interaction: stop click without a user, channel or action_ts")
	}
	if cb.User.ID != v.User && !slices.Contains(d.TurnAdmins, cb.User.ID) {
		note := "Only <@" + v.User + "> can stop this."
		if len(d.TurnAdmins) > 0 {
			note = "Only <@" + v.User + "> (or an admin of this bot) can stop this."
		}
		d.tell(ctx, cb.ResponseURL, note)
		return nil, nil
	}
	team := v.Team
	if team == "" {
		team = cb.Team.ID
	}
	data, err := json.Marshal(targetData{Team: team})
	if err != nil {
		return nil, fmt.Errorf("slack: reply data: %w", err)
	}
	return &wire.ChatMessage{
		Kind: Kind, Chat: team + ":" + cb.Channel.ID,
		// One click is one command: Slack's redelivery of the same click
		// (same action_ts) is deduplicated by the chat workflow.
		ID:   "stop-click:" + a.ActionTs,
		Root: v.Thread, Direct: strings.HasPrefix(cb.Channel.ID, "D"), Summoned: true,
		Command: wire.CommandStop, StopTurn: v.Message,
		User: cb.User.ID, UserName: "<@" + cb.User.ID + ">", Data: data, Policy: d.Policy,
	}, nil
}

// tell shows text privately to the clicker, in the background (the
// interaction must be answered within 3 s); a response_url that is not
// Slack's is never called.
func (d *Door) tell(ctx context.Context, responseURL, text string) {
	if !d.allowedResponseURL(responseURL) {
		return
	}
	ctx = context.WithoutCancel(ctx)
	go func() {
		if err := respondEphemeral(ctx, responseURL, text); err != nil {
			slog.Warn("slack: cannot tell the clicker", "error", err)
		}
	}()
}
