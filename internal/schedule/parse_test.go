package schedule

import (
	"slices"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name, schedule, zone, want string
	}{
		{"empty", "  ", "",
			`schedule is empty: want five cron fields such as "0 2 * * *" or a descriptor such as @daily`},
		{"too few fields", "0 2 * *", "",
			`schedule "0 2 * *" has 4 fields, want 5 (minute hour day-of-month month day-of-week) or a descriptor such as @daily`},
		{"seconds field", "0 0 2 * * *", "",
			`schedule "0 0 2 * * *" has 6 fields: a seconds field is not supported, want 5 (minute hour day-of-month month day-of-week)`},
		{"minute out of range", "61 * * * *", "",
			`schedule "61 * * * *": minute field "61": end of range (61) above maximum (59): 61`},
		{"hour out of range", "0 24 * * *", "",
			`schedule "0 24 * * *": hour field "24": end of range (24) above maximum (23): 24`},
		{"bad day-of-week name", "0 2 * * MON-FRX", "",
			`schedule "0 2 * * MON-FRX": day-of-week field "MON-FRX": failed to parse int from FRX: strconv.Atoi: parsing "FRX": invalid syntax`},
		{"zero step", "*/0 * * * *", "",
			`schedule "*/0 * * * *": minute field "*/0": step of range should be a positive number: */0`},
		{"never fires", "0 0 30 2 *", "",
			`schedule "0 0 30 2 *" never fires: no date matches its day-of-month and month (such as 30 February)`},
		{"unknown descriptor", "@fortnightly", "",
			`schedule "@fortnightly": unknown descriptor @fortnightly, want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>`},
		{"descriptor with arguments", "@daily 2", "",
			`schedule "@daily 2": descriptor @daily takes no arguments`},
		{"unknown zone", "0 2 * * *", "Mars/Olympus",
			`unknown time zone "Mars/Olympus": want an IANA zone name such as "Europe/Berlin" or "UTC"`},
		{"unknown zone in prefix", "CRON_TZ=Berlin 0 2 * * *", "",
			`unknown time zone "Berlin": want an IANA zone name such as "Europe/Berlin" or "UTC"`},
		{"Local zone", "0 2 * * *", "Local",
			`time zone "Local" is the operator's own zone: name an IANA zone such as "Europe/Berlin" or "UTC"`},
		{"both prefix and timeZone", "CRON_TZ=Europe/Berlin 0 2 * * *", "Europe/Paris",
			`schedule "CRON_TZ=Europe/Berlin 0 2 * * *" has a time zone prefix and timeZone is "Europe/Paris": set the time zone in only one of them`},
		{"both TZ prefix and timeZone, same zone", "TZ=UTC 0 2 * * *", "UTC",
			`schedule "TZ=UTC 0 2 * * *" has a time zone prefix and timeZone is "UTC": set the time zone in only one of them`},
		{"empty prefix zone", "CRON_TZ= 0 2 * * *", "",
			`schedule "CRON_TZ= 0 2 * * *": the time zone after "CRON_TZ=" is empty`},
		{"prefix only", "CRON_TZ=Europe/Berlin", "",
			`schedule "CRON_TZ=Europe/Berlin" has a time zone but no schedule after it`},
		{"two prefixes", "CRON_TZ=Europe/Berlin TZ=UTC 0 2 * * *", "",
			`schedule "CRON_TZ=Europe/Berlin TZ=UTC 0 2 * * *" has more than one time zone prefix`},
		{"@every 10s", "@every 10s", "",
			`schedule "@every 10s": every 10s is more often than once a minute, too often for a volume backup`},
		{"@every 59s", "@every 59s", "",
			`schedule "@every 59s": every 59s is more often than once a minute, too often for a volume backup`},
		{"@every negative", "@every -1h", "",
			`schedule "@every -1h": every -1h0m0s is more often than once a minute, too often for a volume backup`},
		{"@every not a duration", "@every soon", "",
			`schedule "@every soon": "soon" is not a duration such as 90m or 6h`},
		{"@every without a duration", "@every", "",
			`schedule "@every": @every takes one duration, such as "@every 6h"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.schedule, tt.zone)
			if err == nil {
				t.Fatalf("Parse(%q, %q) = %v, want an error", tt.schedule, tt.zone, s)
			}
			if err.Error() != tt.want {
				t.Errorf("Parse(%q, %q) error\n got: %s\nwant: %s", tt.schedule, tt.zone, err, tt.want)
			}
			if verr := Validate(tt.schedule, tt.zone); verr == nil || verr.Error() != err.Error() {
				t.Errorf("Validate = %v, want Parse's error", verr)
			}
		})
	}
}

func TestParseAccepts(t *testing.T) {
	from := at("2026-12-03T10:20:00Z")
	tests := []struct {
		schedule, zone, wantNext string
	}{
		{"*/15 * * * *", "", "2026-12-03T10:30:00Z"},
		{"0 3 * * 1-5", "", "2026-12-04T03:00:00Z"}, // 2026-12-03 is a Thursday
		{"0 3 * * SAT,SUN", "", "2026-12-05T03:00:00Z"},
		{"0 0 1 JAN *", "", "2027-01-01T00:00:00Z"},
		{"  0   2 * * *  ", "", "2026-12-04T02:00:00Z"}, // extra blanks are not an error
		{"@hourly", "", "2026-12-03T11:00:00Z"},
		{"@daily", "", "2026-12-04T00:00:00Z"},
		{"@midnight", "", "2026-12-04T00:00:00Z"},
		{"@weekly", "", "2026-12-06T00:00:00Z"},
		{"@monthly", "", "2027-01-01T00:00:00Z"},
		{"@yearly", "", "2027-01-01T00:00:00Z"},
		{"@annually", "", "2027-01-01T00:00:00Z"},
		{"@every 1m", "", "2026-12-03T10:21:00Z"},
		{"@every 6h", "", "2026-12-03T16:20:00Z"},
		{"@every 1h30m", "Europe/Berlin", "2026-12-03T11:50:00Z"}, // a zone does not move @every
		{"@daily", "Asia/Tokyo", "2026-12-03T15:00:00Z"},
		{"TZ=Asia/Tokyo 0 3 * * *", "", "2026-12-03T18:00:00Z"},
		{"CRON_TZ=UTC 0 3 * * *", "", "2026-12-04T03:00:00Z"},
		{"0 0 29 2 *", "", "2028-02-29T00:00:00Z"}, // rare is not never
	}
	for _, tt := range tests {
		s, err := Parse(tt.schedule, tt.zone)
		if err != nil {
			t.Errorf("Parse(%q, %q): %v", tt.schedule, tt.zone, err)
			continue
		}
		if next := s.Next(from); show(&next) != tt.wantNext {
			t.Errorf("Parse(%q, %q).Next(%s) = %s, want %s", tt.schedule, tt.zone, show(&from), show(&next), tt.wantNext)
		}
	}
}

// TestParseIsUTCByDefault guards against robfig/cron's default, the operator's local zone.
func TestParseIsUTCByDefault(t *testing.T) {
	saved := time.Local
	t.Cleanup(func() { time.Local = saved })
	time.Local = time.FixedZone("elsewhere", 5*3600)
	s := mustParse(t, "0 2 * * *", "")
	if next := s.Next(at("2026-12-03T00:00:00Z")); show(&next) != "2026-12-03T02:00:00Z" {
		t.Errorf("Next = %s, want 02:00 UTC", show(&next))
	}
}

func TestTimeZonePrefixAndFieldGiveTheSameTicks(t *testing.T) {
	from, to := at("2026-01-01T00:00:00Z"), at("2027-01-01T00:00:00Z")
	for _, spec := range []string{"0 2 * * *", "30 1 * * 0", "*/30 * * * *", "@daily"} {
		field := ticks(mustParse(t, spec, "Europe/Berlin"), from, to)
		if len(field) == 0 {
			t.Fatalf("%q: no ticks", spec)
		}
		for _, prefix := range []string{"CRON_TZ=Europe/Berlin ", "TZ=Europe/Berlin "} {
			if got := ticks(mustParse(t, prefix+spec, ""), from, to); !slices.Equal(got, field) {
				t.Errorf("%q: %d ticks with the prefix, %d with timeZone", prefix+spec, len(got), len(field))
			}
		}
		// A half-hourly schedule keeps its real-time rhythm through both DST changes, so in a
		// whole-hour zone it ticks at the same instants as in UTC; the others must move.
		halfHourly := spec == "*/30 * * * *"
		if utc := ticks(mustParse(t, spec, ""), from, to); slices.Equal(utc, field) != halfHourly {
			t.Errorf("%q: Berlin ticks equal UTC ticks: %t, want %t", spec, !halfHourly, halfHourly)
		}
	}
	// 02:00 Berlin is 01:00 UTC in winter (CET, +1) and 00:00 UTC in summer (CEST, +2).
	s := mustParse(t, "0 2 * * *", "Europe/Berlin")
	for from, want := range map[string]string{
		"2026-01-15T12:00:00Z": "2026-01-16T01:00:00Z",
		"2026-07-15T12:00:00Z": "2026-07-16T00:00:00Z",
	} {
		if next := s.Next(at(from)); show(&next) != want {
			t.Errorf("Next(%s) = %s, want %s", from, show(&next), want)
		}
	}
}

func TestEveryIsNotAZonedSpec(t *testing.T) {
	if _, ok := mustParse(t, "@every 2h", "").(cron.ConstantDelaySchedule); !ok {
		t.Error("@every must parse to cron.ConstantDelaySchedule: Decide counts it by division")
	}
}
