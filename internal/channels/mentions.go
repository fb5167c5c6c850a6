package channels

// MentionsOthers reports whether a group message that @mentions the users
// mentioned (platform IDs; "" entries are ignored) is addressed to them
// rather than to the bot: someone is mentioned and bot is not among them.
// Doors set wire.ChatMessage.MentionsOthers from it: in context mode
// such a message is discussion between people, buffered as context, even
// as a bare reply in a thread the bot owns. With bot unknown ("") every
// mention counts as someone else's.
func MentionsOthers(mentioned []string, bot string) bool {
	others := false
	for _, id := range mentioned {
		switch id {
		case "":
		case bot:
			return false
		default:
			others = true
		}
	}
	return others
}
