package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gotune/gotune/workers"
)

func devicesCommand() *cli.Command {
	return &cli.Command{
		Name:  "devices",
		Usage: "show the CPUs, memory and GPUs this node offers",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON array of nodes"}},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return badInput(fmt.Errorf("devices takes no arguments, got %d", c.NArg()))
			}
			nodes := []workers.Node{workers.Discover()}
			if c.Bool("json") {
				out := make([]nodeJSON, len(nodes))
				for i, n := range nodes {
					out[i] = toNodeJSON(n)
				}
				return writeJSON(c.App.Writer, out)
			}
			printInventory(c.App.Writer, nodes)
			return nil
		},
	}
}

// nodeJSON is a node as `gotune devices --json` prints it: sizes in bytes.
type nodeJSON struct {
	Name        string    `json:"name"`
	CPUs        float64   `json:"cpus"`
	MemoryBytes int64     `json:"memory_bytes"`
	GPUs        []gpuJSON `json:"gpus"`
	GPUNote     string    `json:"gpu_note,omitempty"`
}

type gpuJSON struct {
	Index int `json:"index"`
	// MIG is the MIG device's index within GPU Index; null for a whole GPU.
	MIG         *int   `json:"mig"`
	UUID        string `json:"uuid,omitempty"`
	Name        string `json:"name"`
	MemoryBytes int64  `json:"memory_bytes"`
	// Visible is how CUDA_VISIBLE_DEVICES names the device.
	Visible string `json:"cuda_visible_devices"`
}

func toNodeJSON(n workers.Node) nodeJSON {
	out := nodeJSON{Name: n.Name, CPUs: n.CPUs, MemoryBytes: int64(n.Memory), GPUs: []gpuJSON{}, GPUNote: n.GPUNote}
	for _, g := range n.GPUs {
		j := gpuJSON{Index: g.Index, UUID: g.UUID, Name: g.Name, MemoryBytes: int64(g.Memory), Visible: g.VisibleID()}
		if g.MIG >= 0 {
			j.MIG = &g.MIG
		}
		out.GPUs = append(out.GPUs, j)
	}
	return out
}

// printInventory writes each node's summary line, then its GPUs as a
// table, or the one line that says why it has none.
func printInventory(w io.Writer, nodes []workers.Node) {
	for i, n := range nodes {
		if i > 0 {
			fmt.Fprintln(w)
		}
		mem := "memory unknown"
		if n.Memory > 0 {
			mem = n.Memory.Human() + " memory"
		}
		fmt.Fprintf(w, "node %s: %g CPUs, %s, %d GPUs\n", n.Name, n.CPUs, mem, len(n.GPUs))
		if len(n.GPUs) > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "GPU\tNAME\tMEMORY\tUUID")
			for _, g := range n.GPUs {
				uuid := g.UUID
				if uuid == "" {
					uuid = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.Label(), g.Name, g.Memory.Human(), uuid)
			}
			tw.Flush()
		}
		if n.GPUNote != "" {
			fmt.Fprintln(w, n.GPUNote)
		}
	}
}
