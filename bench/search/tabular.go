package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gotune/gotune/search"
	"github.com/gotune/gotune/searchspace"
)

// table is a tabular benchmark: every configuration of a finite space
// and its value, generated here and handed to optuna_peer.py as JSON so
// that both sides look up the same numbers. A parameter is ordinal (an
// integer level, 0 to levels−1, modelled as randint) or categorical (a
// choice of strings whose order says nothing).
type table struct {
	Name string `json:"name"`
	// Levels holds each parameter's number of values; Categorical says
	// which are choices.
	Levels      []int  `json:"levels"`
	Categorical []bool `json:"categorical"`
	// Values holds the value of each configuration, the last parameter
	// varying fastest.
	Values []float64 `json:"values"`
	Min    float64   `json:"min"`
}

// makeTables generates the tabular benchmarks: discretised Branin
// (2 × 41 levels), Hartmann6 (6 × 5 levels), 4-D Rosenbrock (4 × 9
// levels on [−2, 2]) and 4-D Levy (4 × 13 levels, the integers of
// [−5, 7]); an HPO-like table of Hartmann6 where two of the six
// parameters are categorical (their 5 levels shuffled, so that their
// order carries nothing); nas_cell_t, a cell-like space of 6 categorical
// choices of 5 operations (see nasCell); and mlp_digits_t, the built-in
// mlp's validation error on the digits over a grid of its
// hyperparameters (see mlpDigits). Finite spaces like these are where
// suggestions repeat.
func makeTables() []table {
	grid := func(levels int, lo, hi float64) func(int) float64 {
		return func(k int) float64 { return lo + (hi-lo)*float64(k)/float64(levels-1) }
	}
	shuffled := rand.New(rand.NewPCG(31, 31)).Perm(5)
	specs := []struct {
		name        string
		levels      []int
		categorical []bool
		f           func(idx []int) float64
	}{
		{"branin_t", []int{41, 41}, []bool{false, false}, func(idx []int) float64 {
			return branin([]float64{grid(41, -5, 10)(idx[0]), grid(41, 0, 15)(idx[1])})
		}},
		{"hartmann6_t", []int{5, 5, 5, 5, 5, 5}, make([]bool, 6), func(idx []int) float64 {
			x := make([]float64, 6)
			for i, k := range idx {
				x[i] = grid(5, 0, 1)(k)
			}
			return hartmann6(x)
		}},
		{"rosenbrock4_t", []int{9, 9, 9, 9}, make([]bool, 4), func(idx []int) float64 {
			x := make([]float64, 4)
			for i, k := range idx {
				x[i] = grid(9, -2, 2)(k)
			}
			return rosenbrock(x)
		}},
		{"hpo_mixed_t", []int{5, 5, 5, 5, 5, 5}, []bool{true, false, false, true, false, false}, func(idx []int) float64 {
			x := make([]float64, 6)
			for i, k := range idx {
				if i == 0 || i == 3 {
					k = shuffled[k]
				}
				x[i] = grid(5, 0, 1)(k)
			}
			return hartmann6(x)
		}},
		{"levy4_t", []int{13, 13, 13, 13}, make([]bool, 4), func(idx []int) float64 {
			x := make([]float64, 4)
			for i, k := range idx {
				x[i] = grid(13, -5, 7)(k)
			}
			return levy(x)
		}},
		{"nas_cell_t", []int{5, 5, 5, 5, 5, 5}, []bool{true, true, true, true, true, true}, newNASCell(201).err},
		{"mlp_digits_t", mlpDigitsLevels, mlpDigitsCategorical, newMLPDigits().err},
	}
	var out []table
	for _, s := range specs {
		tb := table{Name: s.name, Levels: s.levels, Categorical: s.categorical, Min: math.Inf(1)}
		idx := make([]int, len(s.levels))
		for {
			v := s.f(idx)
			tb.Values = append(tb.Values, v)
			tb.Min = min(tb.Min, v)
			i := len(idx) - 1
			for ; i >= 0; i-- {
				if idx[i]++; idx[i] < s.levels[i] {
					break
				}
				idx[i] = 0
			}
			if i < 0 {
				break
			}
		}
		out = append(out, tb)
	}
	return out
}

func (tb *table) space() *searchspace.Space {
	params := make([]searchspace.Param, len(tb.Levels))
	for i, n := range tb.Levels {
		name := fmt.Sprintf("p%d", i)
		if tb.Categorical[i] {
			vs := make([]any, n)
			for k := range vs {
				vs[k] = "c" + strconv.Itoa(k)
			}
			params[i] = searchspace.Param{Name: name, Domain: searchspace.Choice{Values: vs}}
		} else {
			params[i] = searchspace.Param{Name: name, Domain: searchspace.RandInt{Low: 0, High: int64(n)}}
		}
	}
	s, err := searchspace.New(params...)
	if err != nil {
		panic(err)
	}
	return s
}

// lookup returns the value of cfg and its index in the table.
func (tb *table) lookup(cfg map[string]any) (float64, int) {
	at := 0
	for i, n := range tb.Levels {
		var k int
		switch v := cfg[fmt.Sprintf("p%d", i)].(type) {
		case int64:
			k = int(v)
		case string:
			k, _ = strconv.Atoi(strings.TrimPrefix(v, "c"))
		}
		at = at*n + k
	}
	return tb.Values[at], at
}

// pendingSetting is how many trials run at once and how they return:
// sync asks for k configurations, then tells all k results; async keeps
// k trials pending, telling the oldest and asking one more each time.
type pendingSetting struct {
	k     int
	async bool
}

func (p pendingSetting) String() string {
	if p.k == 1 {
		return "k1"
	}
	if p.async {
		return fmt.Sprintf("async%d", p.k)
	}
	return fmt.Sprintf("sync%d", p.k)
}

// tabularRun is one run's outcome: the regret after each trial, and the
// suggestions that repeat one pending at the time (within its batch, for
// sync) or one suggested before at all.
type tabularRun struct {
	regret                  []float64
	pendingRepeats, repeats int
}

// gotuneTabularSystems are gotune's searchers in the tabular benchmark:
// TPE as it is, and TPE as it was before it knew of pending trials and
// kept from repeats.
var gotuneTabularSystems = []string{"gotune_tpe", "gotune_tpe_blind"}

// driveTabular runs system on tb for n trials with the pending setting.
func driveTabular(tb *table, system string, seed int64, n int, ps pendingSetting) (tabularRun, error) {
	opts := []search.TPEOption{}
	if system == "gotune_tpe_blind" {
		opts = append(opts, search.TPEIgnorePending(), search.TPEAllowRepeats())
	}
	s, err := search.NewTPE(tb.space(), seed, opts...)
	if err != nil {
		return tabularRun{}, err
	}
	var run tabularRun
	best := math.Inf(1)
	ever := map[int]bool{}
	pending := map[int]int{} // table index → trials pending with it
	type running struct {
		trial, at int
		value     float64
	}
	var queue []running
	tell := func() {
		r := queue[0]
		queue = queue[1:]
		if pending[r.at]--; pending[r.at] == 0 {
			delete(pending, r.at)
		}
		obs := search.Observation{Step: 1, Score: r.value}
		s.OnTrialEnd(r.trial, search.TrialEnd{Status: search.TrialCompleted, Last: &obs})
	}
	for trial := 1; trial <= n; trial++ {
		if len(queue) == ps.k {
			if ps.async {
				tell()
			} else {
				for len(queue) > 0 {
					tell()
				}
			}
		}
		cfg, err := s.Suggest(trial)
		if errors.Is(err, search.ErrExhausted) {
			break
		}
		if err != nil {
			return run, err
		}
		v, at := tb.lookup(cfg)
		if pending[at] > 0 {
			run.pendingRepeats++
		}
		if ever[at] {
			run.repeats++
		}
		ever[at] = true
		pending[at]++
		queue = append(queue, running{trial, at, v})
		best = min(best, v)
		run.regret = append(run.regret, best-tb.Min)
	}
	return run, nil
}

// tabularSettings are the pending settings measured.
var tabularSettings = []pendingSetting{{1, false}, {8, false}, {8, true}, {32, false}, {32, true}}

// runTabular measures gotune's TPE (and Optuna's through the peer, in
// the same run) on the tabular benchmarks at each pending setting. Up to
// -parallel of gotune's runs, and as many peer processes (one per table
// and setting), run at once.
func runTabular(o options, out *json.Encoder, peerOK bool) error {
	tables := makeTables()
	if o.tabularTables != nil {
		tables = slices.DeleteFunc(tables, func(tb table) bool { return !slices.Contains(o.tabularTables, tb.Name) })
		if len(tables) != len(o.tabularTables) {
			return fmt.Errorf("-tabular-tables %s: no such table among %s", strings.Join(o.tabularTables, ","), tableNames())
		}
	}
	systems := gotuneTabularSystems
	if o.tabularSystems != nil {
		systems = o.tabularSystems
		for _, s := range systems {
			if !slices.Contains(gotuneTabularSystems, s) {
				return fmt.Errorf("-tabular-systems: no searcher %q (%s)", s, strings.Join(gotuneTabularSystems, ", "))
			}
		}
	}
	// runs[system/table/setting] holds every seed's run.
	runs := map[string][]tabularRun{}
	// Read before the runs, so that a wrong file fails at once and is
	// read before -tabular-runs could overwrite it.
	var before map[string][]tabularRun
	if o.tabularAgainst != "" {
		var err error
		if before, err = readSavedRuns(o.tabularAgainst); err != nil {
			return err
		}
	}
	var saved *json.Encoder
	if o.tabularRuns != "" {
		f, err := os.Create(o.tabularRuns)
		if err != nil {
			return err
		}
		defer f.Close()
		saved = json.NewEncoder(f)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var peerOut bytes.Buffer
	if o.tabularPeer != "" {
		if err := readPeerTabular(o.tabularPeer, runs); err != nil {
			return err
		}
		peerOK = false
	}
	if peerOK {
		dir, err := os.MkdirTemp("", "gotune-bench-search")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		slots := make(chan struct{}, o.parallel)
		for _, tb := range tables {
			file := filepath.Join(dir, tb.Name+".json")
			data, err := json.Marshal([]table{tb})
			if err == nil {
				err = os.WriteFile(file, data, 0o644)
			}
			if err != nil {
				return err
			}
			for _, ps := range tabularSettings {
				wg.Add(1)
				go func() {
					defer wg.Done()
					slots <- struct{}{}
					defer func() { <-slots }()
					peer := startPeer(o, "tabular", "--tables", file, "--settings", ps.String(),
						"--first-seed", strconv.Itoa(o.firstSeed), "--seeds", strconv.Itoa(o.optunaTabularSeeds), "--trials", strconv.Itoa(o.trials))
					var lines bytes.Buffer
					peer.lines(json.NewEncoder(&lines), func(m map[string]any) {
						mu.Lock()
						addPeerTabular(runs, m)
						mu.Unlock()
					})
					mu.Lock()
					if peerOut.Len() == 0 || !strings.Contains(peerOut.String(), lines.String()) {
						peerOut.Write(lines.Bytes())
					}
					mu.Unlock()
				}()
			}
		}
	}
	type job struct {
		tb     *table
		ps     pendingSetting
		system string
		seed   int64
	}
	jobs := make(chan job)
	var firstErr error // the first run that failed; the others still run
	var workers sync.WaitGroup
	for range o.parallel {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range jobs {
				r, err := driveTabular(j.tb, j.system, j.seed, o.trials, j.ps)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("%s on %s (%s), seed %d: %w", j.system, j.tb.Name, j.ps, j.seed, err)
					}
					mu.Unlock()
					continue
				}
				k := j.system + "/" + j.tb.Name + "/" + j.ps.String()
				runs[k] = append(runs[k], r)
				if saved != nil {
					saved.Encode(savedRun{j.system, j.tb.Name, j.ps.String(), j.seed, r.regret})
				}
				mu.Unlock()
			}
		}()
	}
	for i := range tables {
		for _, ps := range tabularSettings {
			for _, system := range systems {
				for seed := int64(o.firstSeed); seed < int64(o.firstSeed+o.tabularSeeds); seed++ {
					jobs <- job{&tables[i], ps, system, seed}
				}
			}
		}
	}
	close(jobs)
	workers.Wait()
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	os.Stdout.Write(peerOut.Bytes())
	systems = append(slices.Clip(systems), "optuna_tpe_liar", "optuna_tpe")
	for _, tb := range tables {
		for _, ps := range tabularSettings {
			for _, c := range o.tabularCheckpoints {
				line := map[string]any{
					"bench": "search", "figure": "tabular_regret", "statistic": "median", "table": tb.Name,
					"setting": ps.String(), "trials": c, "seeds": o.tabularSeeds, "first_seed": o.firstSeed,
				}
				for _, system := range systems {
					rs := runs[system+"/"+tb.Name+"/"+ps.String()]
					if len(rs) == 0 {
						continue
					}
					var pendingRepeats, repeats []float64
					for _, r := range rs {
						pendingRepeats = append(pendingRepeats, float64(r.pendingRepeats))
						repeats = append(repeats, float64(r.repeats))
					}
					line[system] = round(median(regretsAt(rs, c)))
					if strings.HasPrefix(system, "optuna_") {
						line[system+"_seeds"] = len(rs)
					}
					if c == slices.Max(o.tabularCheckpoints) {
						line[system+"_pending_repeats"] = round(mean(pendingRepeats))
						line[system+"_repeats"] = round(mean(repeats))
					}
				}
				if ps.k > 1 {
					line["gotune_tpe_k1"] = round(median(regretsAt(runs["gotune_tpe/"+tb.Name+"/k1"], c)))
				}
				out.Encode(line)
			}
		}
	}
	if slices.Contains(systems, "gotune_tpe") {
		printTabularGoals(o, out, tables, runs)
	}
	if before != nil {
		return printTabularAgainst(o, out, tables, runs, before)
	}
	return nil
}

// savedRun is one of gotune's tabular runs as -tabular-runs writes it.
type savedRun struct {
	System  string    `json:"system"`
	Table   string    `json:"table"`
	Setting string    `json:"setting"`
	Seed    int64     `json:"seed"`
	Regret  []float64 `json:"regret"`
}

// readSavedRuns reads the runs that -tabular-runs wrote to file, filed
// as runTabular files its own (system/table/setting).
func readSavedRuns(file string) (map[string][]tabularRun, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	runs := map[string][]tabularRun{}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		var r savedRun
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			return runs, nil
		} else if err != nil {
			return nil, fmt.Errorf("-tabular-against %s: %w", file, err)
		}
		k := r.System + "/" + r.Table + "/" + r.Setting
		runs[k] = append(runs[k], tabularRun{regret: r.Regret})
	}
}

// printTabularAgainst compares this run's TPE with the runs before,
// which -tabular-against named (of the same tables, settings and seeds,
// by other code): for each setting and checkpoint, the runs of each at
// regret 0 (the table's optimum) and the share of pairs of runs (one of
// each, of the same table) in which this run's is ahead, ties counting
// half. A change to the searcher is measured so, less coarsely than by
// medians over tables with few distinct regrets.
func printTabularAgainst(o options, out *json.Encoder, tables []table, runs, before map[string][]tabularRun) error {
	for _, ps := range tabularSettings {
		for _, c := range o.tabularCheckpoints {
			share, atOptimum, atOptimumBefore, pairs := 0.0, 0, 0, 0
			for _, tb := range tables {
				k := "gotune_tpe/" + tb.Name + "/" + ps.String()
				now, then := regretsAt(runs[k], c), regretsAt(before[k], c)
				if len(now) == 0 || len(then) == 0 {
					return fmt.Errorf("-tabular-against %s: no runs of gotune_tpe on %s (%s) in both", o.tabularAgainst, tb.Name, ps)
				}
				share += winShare(now, then) * float64(len(now)*len(then))
				pairs += len(now) * len(then)
				atOptimum += countZero(now)
				atOptimumBefore += countZero(then)
			}
			out.Encode(map[string]any{
				"bench": "search", "figure": "tabular_against", "setting": ps.String(), "trials": c,
				"win_share": round(share / float64(pairs)), "runs_at_optimum": atOptimum, "runs_at_optimum_before": atOptimumBefore,
			})
		}
	}
	return nil
}

// countZero counts the regrets of 0.
func countZero(regrets []float64) int {
	n := 0
	for _, r := range regrets {
		if r == 0 {
			n++
		}
	}
	return n
}

// printTabularGoals prints, for each setting with trials at once and
// each checkpoint, where gotune's TPE stands against the goals set for
// it: the tables on which its median regret is behind its own one trial
// at a time, and behind Optuna's TPE with constant liar (where its runs
// are there); and, less coarse than a median on tables with few distinct
// regrets, the share of pairs of runs (one at once, one one at a time,
// of the same table) in which the run at once is ahead, ties counting
// half, over every table; and, table by table, how many trials one at a
// time take to reach the median regret of those at once (see
// k1EquivalentTrials). Where Optuna's runs with constant liar are there
// at this setting and one at a time, it also prints the same three
// figures for them against their own one at a time
// (optuna_liar_behind_own_k1, optuna_liar_win_share_vs_own_k1,
// optuna_liar_k1_equivalent_trials): how far the goal of keeping
// one-at-a-time quality with trials at once is from what the peer
// reaches.
func printTabularGoals(o options, out *json.Encoder, tables []table, runs map[string][]tabularRun) {
	for _, ps := range tabularSettings[1:] {
		for _, c := range o.tabularCheckpoints {
			line := map[string]any{
				"bench": "search", "figure": "tabular_goals", "setting": ps.String(), "trials": c,
				"seeds": o.tabularSeeds, "first_seed": o.firstSeed, "tables": len(tables),
			}
			behindK1, share := behindOwnK1(runs, "gotune_tpe", tables, ps, c)
			line["behind_k1"], line["win_share_vs_k1"] = behindK1, round(share)
			line["k1_equivalent_trials"] = k1EquivalentTrials(runs, "gotune_tpe", tables, ps, c)
			behindLiar := []string{}
			peer := true
			for _, tb := range tables {
				at := regretsAt(runs["gotune_tpe/"+tb.Name+"/"+ps.String()], c)
				liar := runs["optuna_tpe_liar/"+tb.Name+"/"+ps.String()]
				peer = peer && len(liar) > 0 && len(runs["optuna_tpe_liar/"+tb.Name+"/k1"]) > 0
				if len(liar) > 0 && median(at) > median(regretsAt(liar, c)) {
					behindLiar = append(behindLiar, tb.Name)
				}
			}
			line["behind_optuna_liar"] = behindLiar
			if peer {
				behind, share := behindOwnK1(runs, "optuna_tpe_liar", tables, ps, c)
				line["optuna_liar_behind_own_k1"], line["optuna_liar_win_share_vs_own_k1"] = behind, round(share)
				line["optuna_liar_k1_equivalent_trials"] = k1EquivalentTrials(runs, "optuna_tpe_liar", tables, ps, c)
			}
			out.Encode(line)
		}
	}
}

// behindOwnK1 returns the tables on which system's median regret after c
// trials at setting ps is behind its own one trial at a time, and the
// share of pairs of runs (one at ps, one one at a time, of the same
// table) in which the run at ps is ahead, ties counting half, averaged
// over the tables.
func behindOwnK1(runs map[string][]tabularRun, system string, tables []table, ps pendingSetting, c int) ([]string, float64) {
	behind := []string{}
	share := 0.0
	for _, tb := range tables {
		at := regretsAt(runs[system+"/"+tb.Name+"/"+ps.String()], c)
		k1 := regretsAt(runs[system+"/"+tb.Name+"/k1"], c)
		if median(at) > median(k1) {
			behind = append(behind, tb.Name)
		}
		share += winShare(at, k1) / float64(len(tables))
	}
	return behind, share
}

// k1EquivalentTrials returns, for each table, the fewest trials after
// which system's median regret one trial at a time is no worse than its
// median regret after c trials at setting ps: how many trials one at a
// time do what c do at once. −1 where one at a time never gets there
// within its runs.
func k1EquivalentTrials(runs map[string][]tabularRun, system string, tables []table, ps pendingSetting, c int) map[string]int {
	equivalent := map[string]int{}
	for _, tb := range tables {
		at := median(regretsAt(runs[system+"/"+tb.Name+"/"+ps.String()], c))
		k1 := runs[system+"/"+tb.Name+"/k1"]
		longest := 0
		for _, r := range k1 {
			longest = max(longest, len(r.regret))
		}
		equivalent[tb.Name] = -1
		for n := 1; n <= longest; n++ {
			if median(regretsAt(k1, n)) <= at {
				equivalent[tb.Name] = n
				break
			}
		}
	}
	return equivalent
}

// regretsAt returns each run's regret after c trials (after its last,
// for a run that ended sooner: an exhausted space).
func regretsAt(rs []tabularRun, c int) []float64 {
	regrets := make([]float64, len(rs))
	for i, r := range rs {
		regrets[i] = r.regret[min(c, len(r.regret))-1]
	}
	return regrets
}

// winShare is the share of pairs (x of a, y of b) with x < y, a pair
// with x == y counting half: the chance that a run of a ends with a
// lower regret than a run of b.
func winShare(a, b []float64) float64 {
	wins := 0.0
	for _, x := range a {
		for _, y := range b {
			switch {
			case x < y:
				wins++
			case x == y:
				wins += 0.5
			}
		}
	}
	return wins / float64(len(a)*len(b))
}

// tableNames lists the tables' names, comma-separated.
func tableNames() string {
	var names []string
	for _, tb := range makeTables() {
		names = append(names, tb.Name)
	}
	return strings.Join(names, ", ")
}

// addPeerTabular files one of the peer's tabular runs (a JSON line of
// optuna_peer.py's tabular mode) in runs.
func addPeerTabular(runs map[string][]tabularRun, m map[string]any) {
	var r tabularRun
	for _, v := range m["regret"].([]any) {
		r.regret = append(r.regret, v.(float64))
	}
	r.pendingRepeats = int(m["pending_repeats"].(float64))
	r.repeats = int(m["repeats"].(float64))
	k := "optuna_" + fmt.Sprint(m["sampler"]) + "/" + fmt.Sprint(m["table"]) + "/" + fmt.Sprint(m["setting"])
	runs[k] = append(runs[k], r)
}

// readPeerTabular files the peer's tabular runs saved in file (the JSON
// lines optuna_peer.py's tabular mode prints, of any seeds) in runs.
// Optuna's runs do not depend on gotune's code: saved once, they stand
// beside every later run of gotune's side.
func readPeerTabular(file string, runs map[string][]tabularRun) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	for i, l := range bytes.Split(data, []byte("\n")) {
		var m map[string]any
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		if err := json.Unmarshal(l, &m); err != nil {
			return fmt.Errorf("%s:%d: %w", file, i+1, err)
		}
		if m["mode"] == "tabular" {
			addPeerTabular(runs, m)
		}
	}
	return nil
}

func mean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
