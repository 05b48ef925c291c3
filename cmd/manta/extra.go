package main

import "github.com/spf13/cobra"

// extraCommands lists subcommands added by other parts of Manta (the REST API server).
func extraCommands() []*cobra.Command { return []*cobra.Command{newAPIServerCommand()} }
