//! MPI-1 functions that MPI-3.0 removed (MPI-3.1 section 17.2 lists their replacements) and that
//! MPICH still provides, so that old programs build and run unchanged: each does what its
//! replacement does. The renamed ones call the replacement's profiling entry, so an error names
//! the replacement (the function that did the work); MPI_Type_lb, MPI_Type_ub and
//! MPI_Type_extent are MPI_Type_get_extent's two answers.

use crate::abi::{Aint, H};
use crate::err::put;
use std::ffi::c_void;
use std::os::raw::c_int;

crate::mpi! {
    fn MPI_Type_extent / PMPI_Type_extent(datatype: H, extent: *mut Aint) {
        let t = crate::dtype::old(datatype)?;
        // SAFETY: the caller's output argument.
        unsafe { put(extent, t.extent()) }
    }

    fn MPI_Type_lb / PMPI_Type_lb(datatype: H, displacement: *mut Aint) {
        let t = crate::dtype::old(datatype)?;
        // SAFETY: the caller's output argument.
        unsafe { put(displacement, t.lb) }
    }

    fn MPI_Type_ub / PMPI_Type_ub(datatype: H, displacement: *mut Aint) {
        let t = crate::dtype::old(datatype)?;
        // SAFETY: the caller's output argument.
        unsafe { put(displacement, t.lb + t.extent()) }
    }
}

/// `MPI_x` and `PMPI_x`, both doing what `PMPI_y` does with the same arguments.
macro_rules! renamed {
    ($(fn $name:ident / $pname:ident = $($to:ident)::+ ( $($a:ident : $t:ty),* $(,)? );)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($a: $t),*) -> c_int {
            // SAFETY: the same contract as the caller's (the removed function's arguments are
            // its replacement's), passed on unchanged.
            unsafe { $($to)::+($($a),*) }
        }
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            // SAFETY: the same contract as the caller's, passed on unchanged.
            unsafe { $pname($($a),*) }
        }
    )*};
}

renamed! {
    fn MPI_Type_struct / PMPI_Type_struct = crate::dtype::PMPI_Type_create_struct(count: c_int, array_of_blocklengths: *const c_int, array_of_displacements: *const Aint, array_of_types: *const H, newtype: *mut H);
    fn MPI_Type_hindexed / PMPI_Type_hindexed = crate::dtype::PMPI_Type_create_hindexed(count: c_int, array_of_blocklengths: *const c_int, array_of_displacements: *const Aint, oldtype: H, newtype: *mut H);
    fn MPI_Type_hvector / PMPI_Type_hvector = crate::dtype::PMPI_Type_create_hvector(count: c_int, blocklength: c_int, stride: Aint, oldtype: H, newtype: *mut H);
    fn MPI_Address / PMPI_Address = crate::dtype::PMPI_Get_address(location: *const c_void, address: *mut Aint);
    fn MPI_Errhandler_create / PMPI_Errhandler_create = crate::env::PMPI_Comm_create_errhandler(function: Option<crate::state::ErrFn>, errhandler: *mut H);
    fn MPI_Errhandler_set / PMPI_Errhandler_set = crate::env::PMPI_Comm_set_errhandler(comm: H, errhandler: H);
    fn MPI_Errhandler_get / PMPI_Errhandler_get = crate::env::PMPI_Comm_get_errhandler(comm: H, errhandler: *mut H);
}
