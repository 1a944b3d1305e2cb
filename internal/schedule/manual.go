package schedule

// ManualDue reports whether trigger.manual asks for a run: a run is due once per new non-empty
// token (VolSync's trigger.manual). The caller records the token it started a run for
// (status.lastManualTrigger) and passes it back as lastHandledToken, so re-reconciling, restarting
// or re-applying the same manifest never starts a second run; clearing the token starts none.
func ManualDue(specToken, lastHandledToken string) bool {
	return specToken != "" && specToken != lastHandledToken
}
