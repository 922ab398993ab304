from ._base import AnyThing, DirtyEquals, IsOneOf
from ._boolean import IsFalseLike, IsTrueLike
from ._datetime import IsDate, IsDatetime, IsNow, IsToday
from ._dict import IsDict, IsIgnoreDict, IsPartialDict, IsStrictDict
from ._inspection import HasAttributes, HasName, HasRepr, IsInstance
from ._numeric import (
    IsApprox,
    IsFloat,
    IsInt,
    IsNegative,
    IsNegativeFloat,
    IsNegativeInt,
    IsNonNegative,
    IsNonPositive,
    IsNumber,
    IsNumeric,
    IsPositive,
    IsPositiveFloat,
    IsPositiveInt,
)
from ._other import FunctionCheck, IsJson, IsUUID
from ._sequence import Contains, HasLen, IsList, IsListOrTuple, IsTuple
from ._strings import IsAnyStr, IsBytes, IsStr

__all__ = (
    # base
    'DirtyEquals',
    'AnyThing',
    'IsOneOf',
    # boolean
    'IsTrueLike',
    'IsFalseLike',
    # datetime
    'IsDatetime',
    'IsNow',
    'IsDate',
    'IsToday',
    # dict
    'IsDict',
    'IsPartialDict',
    'IsIgnoreDict',
    'IsStrictDict',
    # sequence
    'Contains',
    'HasLen',
    'IsList',
    'IsTuple',
    'IsListOrTuple',
    # numeric
    'IsNumeric',
    'IsApprox',
    'IsNumber',
    'IsPositive',
    'IsNegative',
    'IsNonPositive',
    'IsNonNegative',
    'IsInt',
    'IsPositiveInt',
    'IsNegativeInt',
    'IsFloat',
    'IsPositiveFloat',
    'IsNegativeFloat',
    # inspection
    'HasAttributes',
    'HasName',
    'HasRepr',
    'IsInstance',
    # other
    'FunctionCheck',
    'IsJson',
    'IsUUID',
    # strings
    'IsStr',
    'IsBytes',
    'IsAnyStr',
    # version
    '__version__',
)

__version__ = '0.0.dev0'
