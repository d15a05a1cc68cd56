"""The fault families, one module each; each module's ``KINDS`` registers its fault kinds.

orchestrator.faults.catalog imports every module of this package: a new family is one new module
here (and its name in models.fault's FaultKind and TARGET_FORMS, which validate plans and records).
"""
