"""The shared ``dispatcher`` the handler modules register their methods on (its own module, so that the handler
modules import it without importing their package: no package-module import cycle)."""

from ..dispatcher import Dispatcher

dispatcher = Dispatcher()
