package schedule

import (
	"fmt"
	"strings"
	"time"
	// The zone database is embedded so that timeZone validation does not depend on the image: a
	// minimal image without /usr/share/zoneinfo would otherwise reject every zone but UTC. The
	// system database still wins when present.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// MinEvery is the shortest @every period Parse accepts. Backing a volume up more often than once
// a minute is a mistake (a run takes longer than that and would only be skipped), and standard
// five-field cron cannot express anything shorter either.
const MinEvery = time.Minute

// parser is cron.ParseStandard's parser. Parse handles the time zone prefix itself, so the
// parser never sees one and never falls back to the operator's local zone.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// fieldNames name the five fields in error messages.
var fieldNames = [5]string{"minute", "hour", "day-of-month", "month", "day-of-week"}

// neverCheckFrom is where Parse looks for a first tick to reject schedules that never fire. A
// fixed time keeps Parse pure; robfig/cron looks five years ahead, which spans a leap year.
var neverCheckFrom = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Parse parses a PVCBackup schedule:
//
//   - five cron fields, minute hour day-of-month month day-of-week, as cron.ParseStandard reads
//     them ("0 2 * * *", "*/15 * * * 1-5");
//   - or a descriptor: @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly, or
//     @every <duration> with a duration of at least MinEvery ("@every 6h");
//   - optionally prefixed with CRON_TZ=<zone> or TZ=<zone>.
//
// timeZone, an IANA zone name such as "Europe/Berlin", is the alternative to the prefix; giving
// both is an error, as is "Local" (the operator's own zone is not the user's). Without either the
// schedule is in UTC. The errors are meant for users: they become the message of the
// InvalidSchedule condition.
//
// On the day daylight saving time ends, a schedule with fixed hours runs once, not twice (see
// dropRepeats); on the day it starts, a time inside the skipped hour does not occur and has no
// tick (robfig/cron's behaviour, kept): "30 2 * * *" in America/New_York does not run that day.
func Parse(schedule, timeZone string) (cron.Schedule, error) {
	fields := strings.Fields(schedule)
	if len(fields) == 0 {
		return nil, fmt.Errorf("schedule is empty: want five cron fields such as \"0 2 * * *\" or a descriptor such as @daily")
	}
	if zone, ok := zonePrefix(fields[0]); ok {
		switch {
		case zone == "":
			return nil, fmt.Errorf("schedule %q: the time zone after %q is empty", schedule, fields[0])
		case timeZone != "":
			return nil, fmt.Errorf("schedule %q has a time zone prefix and timeZone is %q: set the time zone in only one of them", schedule, timeZone)
		case len(fields) == 1:
			return nil, fmt.Errorf("schedule %q has a time zone but no schedule after it", schedule)
		}
		if _, again := zonePrefix(fields[1]); again {
			return nil, fmt.Errorf("schedule %q has more than one time zone prefix", schedule)
		}
		timeZone, fields = zone, fields[1:]
	}
	loc, err := loadZone(timeZone)
	if err != nil {
		return nil, err
	}
	sched, err := parseFields(schedule, fields, loc)
	if err != nil {
		return nil, err
	}
	if sched.Next(neverCheckFrom).IsZero() {
		return nil, fmt.Errorf("schedule %q never fires: no date matches its day-of-month and month (such as 30 February)", schedule)
	}
	return sched, nil
}

// Validate reports why Parse rejects the schedule, or nil. Admission webhooks and CEL check only
// the shape of a schedule; this is the full check.
func Validate(schedule, timeZone string) error {
	_, err := Parse(schedule, timeZone)
	return err
}

// zonePrefix returns the zone of a CRON_TZ=<zone> or TZ=<zone> field.
func zonePrefix(field string) (zone string, ok bool) {
	if z, ok := strings.CutPrefix(field, "CRON_TZ="); ok {
		return z, true
	}
	return strings.CutPrefix(field, "TZ=")
}

// loadZone loads an IANA zone; "" is UTC.
func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if strings.EqualFold(name, "Local") {
		// time.LoadLocation accepts it, but it is whatever zone the operator's pod runs in.
		return nil, fmt.Errorf("time zone %q is the operator's own zone: name an IANA zone such as \"Europe/Berlin\" or \"UTC\"", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q: want an IANA zone name such as \"Europe/Berlin\" or \"UTC\"", name)
	}
	return loc, nil
}

// parseFields parses the schedule without its zone prefix. schedule is the original, for errors.
func parseFields(schedule string, fields []string, loc *time.Location) (cron.Schedule, error) {
	if strings.HasPrefix(fields[0], "@") {
		return parseDescriptor(schedule, fields, loc)
	}
	switch n := len(fields); {
	case n == 6:
		return nil, fmt.Errorf("schedule %q has 6 fields: a seconds field is not supported, want 5 (minute hour day-of-month month day-of-week)", schedule)
	case n != 5:
		return nil, fmt.Errorf("schedule %q has %d fields, want 5 (minute hour day-of-month month day-of-week) or a descriptor such as @daily", schedule, n)
	}
	sched, err := parser.Parse(strings.Join(fields, " "))
	if err != nil {
		return nil, fieldError(schedule, fields, err)
	}
	return inZone(sched.(*cron.SpecSchedule), loc), nil
}

// parseDescriptor parses @every <duration> and the fixed descriptors.
func parseDescriptor(schedule string, fields []string, loc *time.Location) (cron.Schedule, error) {
	if fields[0] == "@every" {
		if len(fields) != 2 {
			return nil, fmt.Errorf("schedule %q: @every takes one duration, such as \"@every 6h\"", schedule)
		}
		d, err := time.ParseDuration(fields[1])
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %q is not a duration such as 90m or 6h", schedule, fields[1])
		}
		if d < MinEvery {
			return nil, fmt.Errorf("schedule %q: every %s is more often than once a minute, too often for a volume backup", schedule, d)
		}
		// A time zone is accepted but changes nothing: @every counts real time, not wall clock.
		return cron.Every(d), nil
	}
	if len(fields) != 1 {
		return nil, fmt.Errorf("schedule %q: descriptor %s takes no arguments", schedule, fields[0])
	}
	sched, err := parser.Parse(fields[0])
	if err != nil {
		return nil, fmt.Errorf("schedule %q: unknown descriptor %s, want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>", schedule, fields[0])
	}
	return inZone(sched.(*cron.SpecSchedule), loc), nil
}

// fieldError names the field robfig/cron choked on (its own errors do not): it parses each
// field alone, the others as "*".
func fieldError(schedule string, fields []string, err error) error {
	for i, f := range fields {
		probe := []string{"*", "*", "*", "*", "*"}
		probe[i] = f
		if _, ferr := parser.Parse(strings.Join(probe, " ")); ferr != nil {
			return fmt.Errorf("schedule %q: %s field %q: %v", schedule, fieldNames[i], f, ferr)
		}
	}
	return fmt.Errorf("schedule %q: %v", schedule, err)
}

// Location is the time zone of a schedule (its CRON_TZ=/TZ= prefix, else timeZone, else UTC):
// the zone in which retention counts days, weeks and months.
func Location(schedule, timeZone string) (*time.Location, error) {
	if fields := strings.Fields(schedule); len(fields) > 0 {
		if zone, ok := zonePrefix(fields[0]); ok {
			return loadZone(zone)
		}
	}
	return loadZone(timeZone)
}
