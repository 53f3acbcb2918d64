"""The flags' help text of lerobot's parser, looked up once per interpreter instead of on every parse.

draccus (lerobot's parser) rebuilds every flag's help text from the config classes' source code each time it builds
a parser: ~1,400 flags of every policy and env type, 1.5-4 s of every `robostream train` parse on these machines
(draccus 0.11 left the cache on `get_attribute_docstring` commented out). The tests parse many times in one
interpreter (main_errors.py) and fork many runs from one (launch.py): with this pure lookup cached (a class's source
does not change while the interpreter runs) those parses cost what one does. Only help text is cached: what a parse
returns is unchanged.
"""

import functools

from draccus.argparsing import ArgumentParser
from draccus.wrappers import docstring


def cache_help_text(*, warm_for: type | None = None) -> None:
    """Cache draccus's help-text lookup in this interpreter; warm_for: a config class whose parser is built now, so
    that processes forked later find its help text looked up."""
    if not hasattr(docstring.get_attribute_docstring, "cache_info"):
        docstring.get_attribute_docstring = functools.lru_cache(maxsize=None)(docstring.get_attribute_docstring)
    if warm_for is not None:
        ArgumentParser(config_class=warm_for)
