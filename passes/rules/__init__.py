"""One file per op family: each op's adjoint, tangent and batching rules side by side, and its
lowering where IREE needs one. Importing a module registers its rules."""
