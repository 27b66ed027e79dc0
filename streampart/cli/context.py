"""The state of one ``streampart`` call: its global options, its settings and catalog, its output.

The root command puts a :class:`CliContext` into typer's context (``ctx.obj``); every command
reads it from there with :func:`cli_context`. Nothing lives at module level, so two calls in one
process (tests with typer's ``CliRunner``) share nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from streampart.cli.output import Output, TextOutput

if TYPE_CHECKING:
    from metastore.catalog import Catalog
    from metastore.models import Table
    from metastore.router import FanOut
    from streampart.config import Settings

T = TypeVar("T")

__all__ = ["CliContext", "catalog_of", "cli_context"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where a command lets its work go as on Ctrl-C (exit status 143, not 130)."""


@dataclass
class CliContext:
    """The global options of a call, and what they open (loaded when a command first asks)."""

    warehouse: str | None = None
    metastore: str | None = None
    config: Path | None = None
    output: Output = field(default_factory=TextOutput)
    spark_master: str | None = None  # --spark-master: spark.master above every other source
    _settings: Settings | None = field(default=None, init=False, repr=False)

    def settings(self, **overrides: Any) -> Settings:
        """The settings: the global options over the environment and the config file.

        Args:
            **overrides: A command's own options, as :func:`streampart.config.load_settings`
                takes them (sections as dicts; None: not given); validated with the rest.
        """
        from streampart.config import load_settings

        given: dict[str, Any] = {
            "warehouse": self.warehouse,
            "metastore": self.metastore,
            "spark": {"master": self.spark_master},
        }
        if overrides:
            return load_settings(self.config, **given, **overrides)
        if self._settings is None:
            self._settings = load_settings(self.config, **given)
        return self._settings

    def catalog(self, settings: Settings | None = None, *, create: bool = False) -> Catalog:
        """Open the catalog (warehouse and metastore) of ``settings`` [default: :meth:`settings`].

        Args:
            create: Make the warehouse and its metastore if they do not exist. Only commands that
                create something pass True (``table create``, ``namespace create``, ``token
                create``, ``cluster add``, ``federation add``, ``demo``); every other command
                refuses a warehouse or metastore that does not exist
                (:class:`~metastore.errors.MissingStoreError`: one line naming it and how to make
                one), so a mistyped ``--warehouse`` or ``--metastore`` is not a new empty one.
        """
        return catalog_of(settings if settings is not None else self.settings(), create=create)

    def answered(self, fanned: FanOut[list[T]]) -> list[T]:
        """A listing over the federation, merged, after a warning naming the metastores that did
        not answer (their part is missing)."""
        if fanned.warning():
            self.output.warn(str(fanned.warning()))
        return fanned.merged()

    def tables(self, catalog: Catalog, name: str | None) -> list[Table]:
        """The table ``name``, or every table of the federation (companions too) when it is None."""
        return [catalog.table(name)] if name else self.answered(catalog.list_tables())


def cli_context(ctx: typer.Context) -> CliContext:
    """The call's :class:`CliContext` (a default one where no root command made it)."""
    return ctx.ensure_object(CliContext)


def catalog_of(settings: Settings, *, create: bool = False) -> Catalog:
    """The catalog (warehouse and metastore) of ``settings`` (see :meth:`CliContext.catalog`); also
    what each of ``streampart serve --workers``' processes opens."""
    from metastore.catalog import Catalog

    return Catalog.open(
        settings.warehouse,
        settings.metastore.get_secret_value() if settings.metastore else None,
        secrets=settings.federation.secret_values(),
        refresh_s=settings.federation.refresh_interval.total_seconds(),
        fail_fast_s=settings.federation.health_interval.total_seconds(),
        create=create,
    )
