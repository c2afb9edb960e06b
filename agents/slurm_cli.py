"""PLACEHOLDER: replaced by the Slurm helper."""

import typer

slurm_app = typer.Typer(help="Slurm integration.")
