"""Genotype imputation from VCF: haplotype copying (the default), table models (SPIN, NPT) and a
nearest-haplotype baseline.

    from semiparam.genomics import GenotypeImputer, impute_vcf
    summary = impute_vcf("ref.vcf.gz", "target.vcf.gz", "imputed.vcf.gz")  # model="copy"

VCF input/output needs the ``genomics`` extra (``pip install 'semiparam[genomics]'``, cyvcf2).
"""

from ..data.genotypes import GenotypeData, HaplotypePanel, VariantSites
from ..data.vcf import read_positions, read_reference_panel, read_vcf
from ..data.vcf_writer import write_genotypes_vcf
from .copying import CopyingSettings, read_genetic_map
from .imputer import GenotypeImputer
from .metrics import (
    dosage_r2_estimate,
    evaluate_imputation,
    genotype_concordance,
    minor_allele_frequency,
    pooled_r2,
    r2_by_maf,
)
from .phasing import phase_window
from .pipeline import AlignedTargets, AlignmentReport, align_targets, fit_panel, impute_vcf, peak_memory_mb
from .presets import PRESETS, genomics_configs
from .simulate import simulate_haplotypes, simulate_panel, split_samples
from .windows import Window, WindowSpec, plan_windows, token_bit_probabilities, tokenize

__all__ = [
    "PRESETS",
    "AlignedTargets",
    "AlignmentReport",
    "CopyingSettings",
    "GenotypeData",
    "GenotypeImputer",
    "HaplotypePanel",
    "VariantSites",
    "Window",
    "WindowSpec",
    "align_targets",
    "dosage_r2_estimate",
    "evaluate_imputation",
    "fit_panel",
    "genomics_configs",
    "genotype_concordance",
    "impute_vcf",
    "minor_allele_frequency",
    "peak_memory_mb",
    "phase_window",
    "plan_windows",
    "pooled_r2",
    "r2_by_maf",
    "read_genetic_map",
    "read_positions",
    "read_reference_panel",
    "read_vcf",
    "simulate_haplotypes",
    "simulate_panel",
    "split_samples",
    "token_bit_probabilities",
    "tokenize",
    "write_genotypes_vcf",
]
